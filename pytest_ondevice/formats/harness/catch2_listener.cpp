// Catch2's verdicts as its framework decided them, linked by pytest-ondevice into every
// Catch2 binary (docs/protocol.md, "Who printed it"). A test can print Catch2's own lines
// (`All tests passed`, `test cases: 3 | 3 passed`) and then _exit(0); it cannot print these
// without running this code: each line is stamped with a nonce drawn at run time, the
// verdicts come from a listener's events (CATCH_REGISTER_LISTENER), and the closing line
// from the end of the run, which a test that leaves early never reaches.
//
// Catch2 v2 (Debian's catch2, 2.13). A case's name may hold spaces: on our lines it is
// percent-encoded (space, '%' and control characters), and the parser decodes it.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "ondevice_stamp.h"

namespace {

using ondevice_stamp::encoded;
using ondevice_stamp::kMaxMessageLines;

std::string where(const Catch::SourceLineInfo &at) { return std::string(at.file) + ":" + std::to_string(at.line); }

class Listener : public Catch::TestEventListenerBase, private ondevice_stamp::Stamp {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testRunStarting(const Catch::TestRunInfo &info) override {
    TestEventListenerBase::testRunStarting(info);
    declare();  // once: a main that runs a session twice is one run
  }

  void testCaseStarting(const Catch::TestCaseInfo &info) override {
    TestEventListenerBase::testCaseStarting(info);
    running_ = encoded(info.name);
    started_.insert(info.name);
    sections_.clear();
    failed_lines_ = 0;
    ok_to_fail_ = info.okToFail();
    ++cases_;
    mark("case " + running_);
  }

  void sectionStarting(const Catch::SectionInfo &info) override {
    TestEventListenerBase::sectionStarting(info);
    sections_.push_back(info.name);  // the first is the case's own (named after it)
  }

  void sectionEnded(const Catch::SectionStats &stats) override {
    TestEventListenerBase::sectionEnded(stats);
    if (!sections_.empty()) sections_.pop_back();
  }

  bool assertionEnded(const Catch::AssertionStats &stats) override {
    const Catch::AssertionResult &r = stats.assertionResult;
    // [!mayfail] and [!shouldfail] failures are the case's passing (Catch2 counts them ok)
    if (running_.empty() || fatal_ || r.isOk() || (ok_to_fail_ && !is_fatal(r))) return true;
    fail(where(r.getSourceInfo()) + ": FAILED:");
    if (sections_.size() > 1) {
      std::string path;
      for (size_t i = 1; i < sections_.size(); ++i) path += (i > 1 ? " / " : "") + sections_[i];
      fail("in section: " + path);
    }
    if (r.hasExpression()) fail("  " + r.getExpressionInMacro());
    switch (r.getResultType()) {
      case Catch::ResultWas::ThrewException: lines("due to unexpected exception with message:", r.getMessage()); break;
      case Catch::ResultWas::FatalErrorCondition: lines("due to a fatal error condition:", r.getMessage()); break;
      case Catch::ResultWas::DidntThrowException: fail("because no exception was thrown where one was expected"); break;
      case Catch::ResultWas::ExplicitFailure: lines("explicitly with message:", r.getMessage()); break;
      default:
        if (r.hasExpandedExpression() && r.getExpandedExpression() != r.getExpression())
          lines("with expansion:", r.getExpandedExpression());
        if (r.hasMessage()) lines("with message:", r.getMessage());
    }
    for (const Catch::MessageInfo &m : stats.infoMessages)
      if (m.type == Catch::ResultWas::Info) lines("with message:", m.message);
    // Catch2's signal handler (a main of the source's own): it then ends the case and the
    // run and re-raises the signal. The failure is told; the end and the closing line are
    // not: the binary dies of it, in this case.
    fatal_ = is_fatal(r);
    return true;
  }

  void testCaseEnded(const Catch::TestCaseStats &stats) override {
    TestEventListenerBase::testCaseEnded(stats);
    if (fatal_ || running_.empty()) return;
    if (stats.totals.testCases.failed > 0 && stats.testInfo.expectedToFail() && failed_lines_ == 0)
      fail("tagged [!shouldfail], but no assertion of the case failed");
    mark("end " + running_ + (stats.totals.testCases.failed > 0 ? " failed" : " passed"));
    running_.clear();
  }

  void testRunEnded(const Catch::TestRunStats &stats) override {
    TestEventListenerBase::testRunEnded(stats);
    if (fatal_ || closed_) return;
    closed_ = true;
    // hidden cases ([.], [!hide], a tag starting with '.') are not run unless asked for
    for (const Catch::TestCase &t : Catch::getAllTestCasesSorted(*m_config)) {
      if (!t.isHidden() || started_.count(t.name)) continue;
      const std::string name = encoded(t.name);
      ++cases_;
      mark("case " + name);
      mark("skip " + name + " hidden in the source (tag " + t.tagsAsString() + "): run only when named");
      mark("end " + name + " skipped");
    }
    mark("summary cases=" + std::to_string(cases_));
  }

 private:
  static bool is_fatal(const Catch::AssertionResult &r) {
    return r.getResultType() == Catch::ResultWas::FatalErrorCondition;
  }

  void fail(const std::string &text) {
    if (failed_lines_ < kMaxMessageLines) {
      size_t nl = text.find('\n');
      mark("fail " + running_ + " " + text.substr(0, nl));
    }
    ++failed_lines_;
  }

  // a heading, then each line of text indented
  void lines(const std::string &heading, const std::string &text) {
    fail(heading);
    size_t at = 0;
    for (int n = 0; at <= text.size() && n < kMaxMessageLines; ++n) {
      size_t nl = text.find('\n', at);
      std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      fail("  " + line);
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }

  std::string running_;  // the case between testCaseStarting and testCaseEnded (encoded)
  std::vector<std::string> sections_;
  std::set<std::string> started_;
  long cases_ = 0;  // the case lines printed: the parser counts them too
  int failed_lines_ = 0;  // of the running case
  bool ok_to_fail_ = false;  // the running case is tagged [!mayfail] or [!shouldfail]
  bool fatal_ = false;
  bool closed_ = false;
};

}  // namespace

CATCH_REGISTER_LISTENER(Listener)
