/* subprog.h: the sub-program registry moved to ir/ (the shape rules of call equations need it). */
#include "../ir/subprog.h"
