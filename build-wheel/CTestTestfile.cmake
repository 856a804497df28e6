# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build-wheel
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[test_hostla]=] "/work/main/build-wheel/test_hostla")
set_tests_properties([=[test_hostla]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;58;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_ir]=] "/work/main/build-wheel/test_ir")
set_tests_properties([=[test_ir]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;58;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_mathfn]=] "/work/main/build-wheel/test_mathfn")
set_tests_properties([=[test_mathfn]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;58;add_test;/work/main/CMakeLists.txt;0;")
