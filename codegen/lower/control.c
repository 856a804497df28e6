/* control.c: lowering of the control family. while, scan and cond are steps of codegen/loop.c:
 * their bodies are compiled as programs of their own and run from the step. Depends on lower.h only. */
#include "lower.h"

const kl_lowering kl_lower_control[] = {
    {KL_P_WHILE, .fuses = 0, .loop = 1},
    {KL_P_SCAN, .fuses = 0, .loop = 1},
    {KL_P_COND, .fuses = 0, .loop = 1},
    {KL_P_WHILE_LIN, .fuses = 0,
     .unsupported = "internal error: while_lin (the linear part of a while loop's reverse-mode derivative) only runs "
                    "transposed"},
    {KL_P_WHILE_BWD, .fuses = 0, .loop = 1},
};
const int kl_lower_control_n = sizeof kl_lower_control / sizeof *kl_lower_control;
