// Boost.Test's verdicts as its framework decided them, linked by pytest-ondevice into every
// Boost.Test binary (docs/protocol.md, "Who printed it"). A test can print Boost.Test's own
// lines (`Leaving test case "x"`, `*** No errors detected`) and then _exit(0); it cannot print
// these without running this code: each line is stamped with a nonce drawn at run time, the
// verdicts come from a test_observer registered by a global fixture (results_collector's
// own account of each case), and the closing line from the end of the run, which a test that
// leaves early never reaches.
//
// A case is named by its path below the master suite (`suite/case`). Boost.Test's log lines
// (`file(12): error: in "suite/case": check ... has failed`) still give the failure text.
#include <boost/test/unit_test.hpp>
#include <boost/test/execution_monitor.hpp>
#include <boost/test/results_collector.hpp>
#include <boost/test/tree/observer.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

extern "C" void ondevice_write(const char *data, size_t len) __attribute__((weak));

namespace {

namespace utf = boost::unit_test;

constexpr int kMaxMessageLines = 40;  // per case: the parser keeps no more

void emit(const std::string &line) {
  std::string text = line + "\n";
  if (ondevice_write) {  // our runtime: stdio flushed first, our line on a line of its own
    ondevice_write(text.data(), text.size());
  } else {
    std::fputs(("\n" + text).c_str(), stdout);
    std::fflush(stdout);
  }
}

std::string draw_nonce() {
  uint64_t x = 0;
  if (FILE *f = std::fopen("/dev/urandom", "rb")) {
    if (std::fread(&x, sizeof x, 1, f) != 1) x = 0;
    std::fclose(f);
  }
  x ^= uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull;
  x ^= uint64_t(reinterpret_cast<uintptr_t>(&x)) << 7;  // ASLR where the source of randomness failed
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// A name as one word: space, '%' and control characters as %XX (the parser decodes them);
// a template case's name may hold a space (`test<std::pair<int, int>>`)
std::string encoded(const std::string &name) {
  std::string out;
  for (unsigned char c : name) {
    if (c <= ' ' || c == '%' || c == 0x7f) {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    } else {
      out += char(c);
    }
  }
  return out.empty() ? "%00" : out;
}

std::string text_of(utf::const_string s) { return std::string(s.begin(), s.end()); }

class Observer : public utf::test_observer {
 public:
  void declare() {
    if (!nonce_.empty()) return;
    nonce_ = draw_nonce();
    emit("#ondevice nonce " + nonce_);
  }

  void test_unit_start(const utf::test_unit &tu) override {
    if (tu.p_type != utf::TUT_CASE) return;
    running_ = encoded(tu.full_name());
    declared_at_ = text_of(tu.p_file_name) + ":" + std::to_string(tu.p_line_num);
    failed_lines_ = 0;
    ++cases_;
    mark("case " + running_);
  }

  void exception_caught(const boost::execution_exception &e) override {
    if (running_.empty()) return;  // a suite's fixture: its cases are told by results_collector
    // an exception thrown by the test has no location: the case's own line stands for it
    const boost::execution_exception::location &at = e.where();
    std::string where = at.m_file_name.is_empty() || at.m_line_num == 0  // Boost's "unknown location"
                            ? declared_at_
                            : text_of(at.m_file_name) + ":" + std::to_string(at.m_line_num);
    fail(where + ": fatal error: " + text_of(e.what()));
  }

  void test_unit_timed_out(const utf::test_unit &tu) override {
    if (tu.p_type == utf::TUT_CASE && !running_.empty()) fail("timed out (the case's timeout decorator)");
  }

  void test_unit_finish(const utf::test_unit &tu, unsigned long) override {
    if (tu.p_type != utf::TUT_CASE) return;
    // after results_collector's own (observers finish in reverse order of priority)
    const utf::test_results &r = utf::results_collector.results(tu.p_id);
    const std::string name = encoded(tu.full_name());
    const char *verdict = r.skipped() ? "skipped" : r.passed() ? "passed" : "failed";
    if (!r.passed() && !r.skipped() && failed_lines_ == 0) {  // the log's lines say why, if any
      if (r.p_expected_failures != 0)
        fail(std::to_string(r.p_assertions_failed) + " assertions failed, where its expected_failures decorator says " +
             std::to_string(r.p_expected_failures));
      else if (r.p_assertions_failed == 0)
        fail("failed (a fixture, or a check outside any assertion: see the log)");
    }
    mark("end " + name + " " + verdict);
    running_.clear();
  }

  void test_unit_skipped(const utf::test_unit &tu, utf::const_string reason) override {
    if (tu.p_type != utf::TUT_CASE) return;  // a suite's cases are each told
    const std::string name = encoded(tu.full_name());
    ++cases_;
    mark("case " + name);
    std::string why = text_of(reason);
    if (why == "disabled") why = "disabled in the source (a disabled() or enable_if decorator)";
    mark("skip " + name + " " + why);
    mark("end " + name + " skipped");
  }

  void test_finish() override {
    if (closed_) return;
    closed_ = true;
    mark("summary cases=" + std::to_string(cases_));
  }

  int priority() override { return 0; }  // finish after results_collector (3) and the log (2)

 private:
  void mark(const std::string &body) { emit("#ondevice " + nonce_ + " " + body); }

  void fail(const std::string &text) {
    size_t at = 0;
    while (at <= text.size() && failed_lines_ < kMaxMessageLines) {
      size_t nl = text.find('\n', at);
      mark("fail " + running_ + " " + text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      ++failed_lines_;
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }

  std::string nonce_;
  std::string running_;  // the case between test_unit_start and test_unit_finish (encoded)
  std::string declared_at_;  // the running case's FILE:LINE
  long cases_ = 0;       // the case lines printed: the parser counts them too
  int failed_lines_ = 0;  // of the running case
  bool closed_ = false;
};

Observer observer;

// The master suite's fixture: set up before its first case, after the framework's own
// observers were registered (a registration at static initialisation would be cleared)
struct Register {
  Register() {
    observer.declare();
    utf::framework::register_observer(observer);
  }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(Register);
