// CppUTest's usual main, linked by pytest-ondevice when a test source has none.
#include <CppUTest/CommandLineTestRunner.h>

int main(int argc, char **argv) { return CommandLineTestRunner::RunAllTests(argc, argv); }
