// GoogleTest's verdicts as its framework decided them, linked by pytest-ondevice into every
// GoogleTest binary (docs/protocol.md, "Who printed it"). A test can print gtest's own lines
// ([       OK ], [  PASSED  ]) and then _exit(0); it cannot print these without running this
// code: each line is stamped with a nonce drawn at run time, the verdicts come from gtest's
// event listener API, and the closing line from the end of RUN_ALL_TESTS, which a test that
// leaves early never reaches.
#include <gtest/gtest.h>

#include <string>

#include "ondevice_stamp.h"

namespace {

using ondevice_stamp::kMaxMessageLines;

std::string name_of(const testing::TestInfo &t) { return std::string(t.test_suite_name()) + "." + t.name(); }

class Listener : public testing::EmptyTestEventListener, private ondevice_stamp::Stamp {
 public:
  void OnTestProgramStart(const testing::UnitTest &) override {
    declare();  // once: a main that calls RUN_ALL_TESTS again is one run
  }

  void OnTestStart(const testing::TestInfo &t) override {
    running_ = name_of(t);
    ++cases_;
    mark("case " + running_);
  }

  void OnTestDisabled(const testing::TestInfo &t) override {
    const std::string name = name_of(t);
    ++cases_;
    mark("case " + name);
    mark("skip " + name + " disabled in the source (DISABLED_ prefix)");
    mark("end " + name + " skipped");
  }

  void OnTestPartResult(const testing::TestPartResult &r) override {
    // gtest holds its lock here: current_test_info() would deadlock
    if (running_.empty()) return;  // a suite's or the program's own: reported when it ends
    part(running_, r, "");
  }

  void OnTestEnd(const testing::TestInfo &t) override {
    const testing::TestResult &r = *t.result();
    const char *verdict = r.Failed() ? "failed" : r.Skipped() ? "skipped" : "passed";
    mark("end " + name_of(t) + " " + verdict);
    running_.clear();
  }

  void OnTestSuiteEnd(const testing::TestSuite &s) override {
    // SetUpTestSuite or TearDownTestSuite failed: the suite's cases share the fault
    const testing::TestResult &r = s.ad_hoc_test_result();
    for (int i = 0; i < r.total_part_count(); ++i) {
      if (!r.GetTestPartResult(i).failed()) continue;
      for (int j = 0; j < s.total_test_count(); ++j) {
        const testing::TestInfo &t = *s.GetTestInfo(j);
        if (t.should_run())
          part(name_of(t), r.GetTestPartResult(i),
               std::string("SetUpTestSuite or TearDownTestSuite of ") + s.name() + " failed:");
      }
    }
  }

  void OnTestProgramEnd(const testing::UnitTest &u) override {
    const testing::TestResult &r = u.ad_hoc_test_result();  // a global Environment's, or outside any suite
    for (int i = 0; i < r.total_part_count(); ++i) {
      const testing::TestPartResult &p = r.GetTestPartResult(i);
      if (p.failed()) mark("problem outside any test: " + where(p) + " " + first_line(p.message()));
    }
    mark("summary cases=" + std::to_string(cases_));
  }

 private:
  static std::string where(const testing::TestPartResult &p) {
    if (p.file_name() == nullptr) return "(unknown file)";
    return std::string(p.file_name()) + (p.line_number() >= 0 ? ":" + std::to_string(p.line_number()) : "");
  }

  static std::string first_line(const char *message) {
    std::string m = message ? message : "";
    return m.substr(0, m.find('\n'));
  }

  void part(const std::string &name, const testing::TestPartResult &p, const std::string &lead) {
    if (p.skipped()) {
      mark("skip " + name + " " + where(p) + ": " + first_line(p.message()));
      return;
    }
    if (!p.failed()) return;
    if (!lead.empty()) mark("fail " + name + " " + lead);
    mark("fail " + name + " " + where(p) + ": Failure");
    std::string m = p.message() ? p.message() : "";
    size_t at = 0;
    for (int n = 0; at <= m.size() && n < kMaxMessageLines; ++n) {
      size_t nl = m.find('\n', at);
      std::string line = m.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      if (!line.empty()) mark("fail " + name + " " + line);
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }

  std::string running_;  // the case between OnTestStart and OnTestEnd
  long cases_ = 0;       // the case lines printed: the parser counts them too
};

// Appended before main: a main of the test's own (sample9's) keeps it, and may release
// gtest's printer without silencing the verdicts.
__attribute__((unused)) const bool installed = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new Listener);
  return true;
}();

}  // namespace
