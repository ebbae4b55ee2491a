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

#include <string>

#include "ondevice_stamp.h"

namespace {

namespace utf = boost::unit_test;

using ondevice_stamp::encoded;

std::string text_of(utf::const_string s) { return std::string(s.begin(), s.end()); }

class Observer : public utf::test_observer, private ondevice_stamp::Stamp {
 public:
  using Stamp::declare;

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
  void fail(const std::string &text) { fail_lines(running_, text, failed_lines_); }

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
