// doctest's verdicts as its framework decided them, linked by pytest-ondevice into every
// doctest binary (docs/protocol.md, "Who printed it"). A test can print doctest's own lines
// (`[doctest] Status: SUCCESS!`) and then _exit(0); it cannot print these without running
// this code: each line is stamped with a nonce drawn at run time, the verdicts come from a
// listener's events (REGISTER_LISTENER), and the closing line from the end of the run, which
// a test that leaves early never reaches.
//
// A case is named `SUITE/NAME` inside a test suite, `NAME` outside one; the name may hold
// spaces: on our lines it is percent-encoded (space, '%' and control characters), and the
// parser decodes it.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "ondevice_stamp.h"

namespace {

using ondevice_stamp::encoded;
using ondevice_stamp::kMaxMessageLines;

std::string name_of(const doctest::TestCaseData &tc) {
  std::string suite = tc.m_test_suite ? tc.m_test_suite : "";
  return encoded(suite.empty() ? tc.m_name : suite + "/" + tc.m_name);
}

std::string where(const char *file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }

class Listener : public doctest::IReporter, private ondevice_stamp::Stamp {
 public:
  explicit Listener(const doctest::ContextOptions &) {}

  void report_query(const doctest::QueryData &) override {}

  void test_run_start() override {
    declare();  // once: a main that runs a context twice is one run
  }

  void test_case_start(const doctest::TestCaseData &tc) override {
    end_pending();
    running_ = name_of(tc);
    declared_at_ = where(tc.m_file.c_str(), int(tc.m_line));
    ok_to_fail_ = tc.m_may_fail || tc.m_should_fail || tc.m_expected_failures > 0;
    subcases_.clear();
    failed_lines_ = 0;
    crashed_ = false;
    ++cases_;
    mark("case " + running_);
  }

  void test_case_reenter(const doctest::TestCaseData &) override { subcases_.clear(); }

  void subcase_start(const doctest::SubcaseSignature &s) override { subcases_.push_back(s.m_name.c_str()); }

  void subcase_end() override {
    if (!subcases_.empty()) subcases_.pop_back();
  }

  void log_assert(const doctest::AssertData &a) override {
    if (!a.m_failed || (a.m_at & doctest::assertType::is_warn) || ok_to_fail_ || running_.empty()) return;
    std::string head = where(a.m_file, a.m_line) + ": " + doctest::failureString(a.m_at) + ": ";
    std::string what = std::string(doctest::assertString(a.m_at)) + "( " + (a.m_expr ? a.m_expr : "") + " )";
    const std::string thrown = a.m_exception.c_str();
    if (a.m_at & doctest::assertType::is_throws) {
      fail(head + what + " did NOT throw at all!");
      subcase_path();
    } else if (a.m_at & (doctest::assertType::is_throws_as | doctest::assertType::is_throws_with)) {
      fail(head + what + (a.m_threw ? " threw a DIFFERENT exception: " + thrown : " did NOT throw at all!"));
      subcase_path();
    } else if (a.m_threw) {
      fail(head + what + " THREW exception: " + thrown);
      subcase_path();
    } else {
      fail(head + what + " is NOT correct!");
      subcase_path();
      fail("  values: " + std::string(doctest::assertString(a.m_at)) + "( " + a.m_decomp.c_str() + " )");
    }
    contexts();
  }

  void log_message(const doctest::MessageData &m) override {
    if ((m.m_severity & doctest::assertType::is_warn) || ok_to_fail_ || running_.empty()) return;  // MESSAGE
    fail(where(m.m_file, m.m_line) + ": " + doctest::failureString(m.m_severity) + ": " + m.m_string.c_str());
    subcase_path();
    contexts();
  }

  void test_case_exception(const doctest::TestCaseException &e) override {
    if (running_.empty()) return;
    // doctest's signal handler (a main of the source's own): it then ends the case and the
    // run and re-raises the signal. The failure is told; the end and the closing line are
    // not: the binary dies of it, in this case.
    fail(declared_at_ + (e.is_crash ? ": FATAL ERROR: test case CRASHED: " : ": ERROR: test case THREW exception: ") +
         e.error_string.c_str());
    crashed_ = crashed_ || e.is_crash;
  }

  void test_case_end(const doctest::CurrentTestCaseStats &st) override {
    if (crashed_ || running_.empty()) return;
    using Reason = doctest::TestCaseFailureReason::Enum;
    if (!st.testCaseSuccess && failed_lines_ == 0) {  // its failures were the kind it expects
      if (st.failure_flags & Reason::ShouldHaveFailedButDidnt) fail("marked should_fail, but no assertion failed");
      if (st.failure_flags & Reason::DidntFailExactlyNumTimes) fail("failed other than its expected_failures");
      if (st.failure_flags & Reason::Timeout) fail("exceeded its timeout");
      if (st.failure_flags & Reason::TooManyFailedAsserts) fail("stopped: too many failed assertions");
      if (failed_lines_ == 0) fail("failed");
    }
    // told once doctest's reporters have had the end too (listeners are called first): its
    // time line and notes are the case's log
    pending_end_ = "end " + running_ + (st.testCaseSuccess ? " passed" : " failed");
    running_.clear();
  }

  void test_case_skipped(const doctest::TestCaseData &tc) override {
    if (!tc.m_skip) return;  // filtered out by the command line: not ours to report
    end_pending();
    const std::string name = name_of(tc);
    ++cases_;
    mark("case " + name);
    mark("skip " + name + " skipped in the source (doctest::skip)");
    mark("end " + name + " skipped");
  }

  void test_run_end(const doctest::TestRunStats &) override {
    if (crashed_ || closed_) return;
    end_pending();
    closed_ = true;
    mark("summary cases=" + std::to_string(cases_));
  }

 private:
  void end_pending() {
    if (pending_end_.empty()) return;
    mark(pending_end_);
    pending_end_.clear();
  }

  // each line of text (a message may hold several)
  void fail(const std::string &text) { fail_lines(running_, text, failed_lines_); }

  // the subcase path of a failure, after its first line
  void subcase_path() {
    if (subcases_.empty()) return;
    std::string path;
    for (size_t i = 0; i < subcases_.size(); ++i) path += (i ? " / " : "") + subcases_[i];
    fail("in subcase: " + path);
  }

  // INFO() and CAPTURE() in scope: what the assertion happened under
  void contexts() {
    const int n = doctest::IReporter::get_num_active_contexts();
    const doctest::IContextScope *const *scopes = doctest::IReporter::get_active_contexts();
    for (int i = 0; i < n && failed_lines_ < kMaxMessageLines; ++i) {
      std::ostringstream text;
      scopes[i]->stringify(&text);
      fail("  logged: " + text.str());
    }
  }

  std::string running_;  // the case between test_case_start and test_case_end (encoded)
  std::string declared_at_;  // the running case's FILE:LINE (an exception has none of its own)
  std::string pending_end_;  // the last case's end, told at the next event
  std::vector<std::string> subcases_;
  long cases_ = 0;  // the case lines printed: the parser counts them too
  int failed_lines_ = 0;  // of the running case
  bool ok_to_fail_ = false;  // may_fail, should_fail or expected_failures: doctest decides alone
  bool crashed_ = false;
  bool closed_ = false;
};

}  // namespace

REGISTER_LISTENER("pytest-ondevice", 1, Listener);
