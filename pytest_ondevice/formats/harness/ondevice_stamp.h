// How pytest-ondevice's hooks in the test frameworks (gtest_listener.cpp, catch2_listener.cpp,
// doctest_listener.cpp, boosttest_observer.cpp) print their lines (docs/protocol.md, "Who
// printed it"): a nonce drawn at run time, declared once (`#ondevice nonce N`), then every
// line stamped with it (`#ondevice N BODY`), each on a line of its own. One copy for every
// hook, so that what the parsers trust (formats/stream.py) is printed the same way by all.
//
// Included as "ondevice_stamp.h": found beside the hook that includes it, whether our builder
// compiles the hook or CMake adds it to a project's target from the installed package.
#ifndef ONDEVICE_STAMP_H
#define ONDEVICE_STAMP_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

extern "C" void ondevice_write(const char *data, size_t len) __attribute__((weak));

namespace ondevice_stamp {

constexpr int kMaxMessageLines = 40;  // a case's failure lines: the parser keeps no more

inline void emit(const std::string &line) {
  std::string text = line + "\n";
  if (ondevice_write) {  // our runtime: stdio flushed first, our line on a line of its own
    ondevice_write(text.data(), text.size());
  } else {
    std::fputs(("\n" + text).c_str(), stdout);
    std::fflush(stdout);
  }
}

inline std::string draw_nonce() {
  uint64_t x = 0;
  if (FILE *f = std::fopen("/dev/urandom", "rb")) {  // built with -fno-exceptions: no random_device
    if (std::fread(&x, sizeof x, 1, f) != 1) x = 0;
    std::fclose(f);
  }
  x ^= uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull;
  x ^= uint64_t(reinterpret_cast<uintptr_t>(&x)) << 7;  // ASLR where the source of randomness failed
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// A name as one word: space, '%' and control characters as %XX (the parser decodes them,
// formats/wordnames.py); a sentence's name (Catch2's, doctest's) or a template case's
// (`test<std::pair<int, int>>`) may hold a space
inline std::string encoded(const std::string &name) {
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

// The run's nonce and the lines stamped with it: a hook's base
class Stamp {
 public:
  // Draws the nonce and declares it, the first time only: a main that runs the framework
  // twice is one run, with one nonce
  void declare() {
    if (!nonce_.empty()) return;
    nonce_ = draw_nonce();
    emit("#ondevice nonce " + nonce_);
  }

  void mark(const std::string &body) const { emit("#ondevice " + nonce_ + " " + body); }

  // Each line of text (a message may hold several) as a failure line of the case named,
  // while its count of them (kept by the caller, per case) is below kMaxMessageLines
  void fail_lines(const std::string &name, const std::string &text, int &counted) const {
    size_t at = 0;
    while (at <= text.size() && counted < kMaxMessageLines) {
      size_t nl = text.find('\n', at);
      mark("fail " + name + " " + text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      ++counted;
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }

 private:
  std::string nonce_;
};

}  // namespace ondevice_stamp

#endif  // ONDEVICE_STAMP_H
