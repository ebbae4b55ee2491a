// CppUTest's usual main, linked by pytest-ondevice when a test source has none; the
// closing line of our plugin (cpputest_plugin.cpp) follows once the framework returned.
#include <CppUTest/CommandLineTestRunner.h>

void ondevice_cpputest_close();

int main(int argc, char **argv) {
  int failures = CommandLineTestRunner::RunAllTests(argc, argv);
  ondevice_cpputest_close();
  return failures;
}
