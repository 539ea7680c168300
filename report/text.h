// report/text.h: printf into a std::string. The report's tables and the pipeline
// timeline are column formats, which printf says best.
//
// defines: strprintf
#pragma once
#include <cstdarg>
#include <cstdio>
#include <string>

namespace paralab {

inline std::string strprintf(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string strprintf(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

}  // namespace paralab
