// CppUTest's verdicts as its framework decided them, linked by pytest-ondevice into every
// CppUTest binary (docs/protocol.md, "Who printed it"). A test can print CppUTest's own lines
// (`TEST(G, N) - 0 ms`, `OK (...)`) and then _exit(0); it cannot print these without running
// this code: each line is stamped with a nonce drawn at run time, a case's start and end come
// from a plugin's pre- and post-test actions, and the closing line from after the last test
// (our main, or an atexit handler that stays silent when a test left in its body).
//
// No heap: CppUTest's leak detector would charge what a plugin keeps to the running test.
#include <CppUTest/TestHarness.h>
#include <CppUTest/TestPlugin.h>
#include <CppUTest/TestRegistry.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

extern "C" void ondevice_write(const char *data, size_t len) __attribute__((weak));
// --ondevice-coverage on bare metal: gcov's counts, sent before the summary that vouches for them
extern "C" void ondevice_coverage_dump(const char *nonce) __attribute__((weak));

namespace {

char nonce[17];
long cases;             // the case lines printed: the parser counts them too
bool in_test;           // between a test's pre- and post-test action: its body may exit()
bool closed;            // the closing line is printed once
size_t failures_at_pre; // the run's failure count when the running test began

void emit(const char *body, const char *a = "", const char *b = "") {
  char line[600];
  int n = std::snprintf(line, sizeof line, "#ondevice %s %s%s%s\n", nonce, body, a, b);
  if (n < 0) return;
  size_t len = n < int(sizeof line) ? size_t(n) : sizeof line - 1;
  if (ondevice_write) {  // our runtime: stdio flushed first, our line on a line of its own
    ondevice_write(line, len);
  } else {
    std::fputs("\n", stdout);
    std::fwrite(line, 1, len, stdout);
    std::fflush(stdout);
  }
}

const char *name_of(const UtestShell &t, char *buf, size_t size) {
  std::snprintf(buf, size, "%s.%s", t.getGroup().asCharString(), t.getName().asCharString());
  return buf;
}

void draw_nonce() {
  uint64_t x = 0;
  if (FILE *f = std::fopen("/dev/urandom", "rb")) {
    if (std::fread(&x, sizeof x, 1, f) != 1) x = 0;
    std::fclose(f);
  }
  x ^= uint64_t(std::time(nullptr)) * 0x9e3779b97f4a7c15ull;
  x ^= uint64_t(reinterpret_cast<uintptr_t>(&x)) << 7;  // ASLR where the source of randomness failed
  std::snprintf(nonce, sizeof nonce, "%016llx", static_cast<unsigned long long>(x));
}

void close_run();

class Plugin : public TestPlugin {
 public:
  Plugin() : TestPlugin("pytest-ondevice") {}

  void preTestAction(UtestShell &t, TestResult &r) override {
    static bool first = true;
    if (first) {  // after every static constructor: the tests outlive this handler
      first = false;
      std::atexit(close_run);
    }
    char name[400];
    ++cases;
    in_test = true;
    failures_at_pre = r.getFailureCount();
    emit("case ", name_of(t, name, sizeof name));
  }

  void postTestAction(UtestShell &t, TestResult &r) override {
    char name[400];
    in_test = false;
    emit("end ", name_of(t, name, sizeof name), r.getFailureCount() > failures_at_pre ? " failed" : " passed");
  }
};

Plugin plugin;

void close_run() {
  if (closed || in_test) return;  // in_test: a test left in its body; the run has no end
  closed = true;
  char name[400], count[32];
  for (UtestShell *t = TestRegistry::getCurrentRegistry()->getFirstTest(); t != nullptr; t = t->getNext()) {
    if (t->willRun()) continue;  // ignored tests reach no plugin: their skip is told here
    ++cases;
    name_of(*t, name, sizeof name);
    emit("case ", name);
    emit("skip ", name, " ignored in the source (IGNORE_TEST)");
    emit("end ", name, " skipped");
  }
  std::snprintf(count, sizeof count, "%ld", cases);
  if (ondevice_coverage_dump) ondevice_coverage_dump(nonce);
  emit("summary cases=", count);
}

bool install() {
  draw_nonce();
  char line[40];
  int n = std::snprintf(line, sizeof line, "#ondevice nonce %s\n", nonce);
  if (ondevice_write) ondevice_write(line, size_t(n));
  else std::fputs(line, stdout);
  TestRegistry::getCurrentRegistry()->installPlugin(&plugin);
  return true;
}

__attribute__((unused)) const bool installed = install();  // after `plugin`: same file, in order

}  // namespace

// Our main calls it after the framework returned (a main of the test's own relies on atexit).
void ondevice_cpputest_close() { close_run(); }
