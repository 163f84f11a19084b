// engine/base/limits.cpp: what this process may still allocate (/proc, cgroup, rlimit) and the
// whole-state check against it.
#include "engine/base/limits.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace eng {
namespace {

// "MemAvailable:   22950812 kB" -> bytes; -1 when the key is absent.
int64_t proc_kb_field(const char* file, std::string_view key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ':') continue;
    try {
      return std::stoll(line.substr(key.size() + 1)) * 1024;
    } catch (...) {
      return -1;
    }
  }
  return -1;
}

// A cgroup v2 file holding a byte count ("max" or absent: -1).
int64_t cgroup_bytes(const char* name) {
  std::ifstream in(std::string("/sys/fs/cgroup/") + name);
  std::string v;
  if (!(in >> v) || v == "max") return -1;
  try {
    return std::stoll(v);
  } catch (...) {
    return -1;
  }
}

void lower_to(AvailableMemory& a, int64_t bytes, const char* source) {
  if (bytes < 0 || (a.bytes > 0 && bytes >= a.bytes)) return;
  a.bytes = std::max<int64_t>(bytes, 1);  // 0 would read as unknown
  a.source = source;
}

}  // namespace

AvailableMemory available_memory() {
  AvailableMemory a;
  lower_to(a, proc_kb_field("/proc/meminfo", "MemAvailable"), "MemAvailable in /proc/meminfo");
  if (a.bytes == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
      lower_to(a, int64_t{pages} * page, "available pages (sysconf _SC_AVPHYS_PAGES)");
  }
  const int64_t max = cgroup_bytes("memory.max"), current = cgroup_bytes("memory.current");
  if (max >= 0 && current >= 0) lower_to(a, std::max<int64_t>(max - current, 0), "cgroup memory.max");
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const int64_t used = std::max<int64_t>(proc_kb_field("/proc/self/status", "VmSize"), 0);
    lower_to(a, std::max<int64_t>(static_cast<int64_t>(as.rlim_cur) - used, 0),
             "RLIMIT_AS (ulimit -v) less this process's VmSize");
  }
  return a;
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

Status check_memory_budget(std::string_view what, std::span<const MemoryItem> items,
                           const AvailableMemory& available, std::string_view hint) {
  int64_t total = 0;
  for (const MemoryItem& i : items) total += i.bytes;  // each item <= kMaxArrayBytes x devices
  if (available.bytes <= 0 || total <= available.bytes) return ok_status();
  std::vector<MemoryItem> largest(items.begin(), items.end());
  std::stable_sort(largest.begin(), largest.end(),
                   [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });
  largest.resize(std::min<size_t>(largest.size(), 5));
  std::string list;
  for (const MemoryItem& i : largest)
    list += fmt::format("{}{} {}", list.empty() ? "" : ", ", i.name, format_bytes(i.bytes));
  return resource_exhausted(
      "{} needs {} ({} bytes) of this host's memory in all, but {} ({} bytes) is available "
      "({}); largest: {}{}{}",
      what, format_bytes(total), total, format_bytes(available.bytes), available.bytes,
      available.source, list, hint.empty() ? "" : "; ", hint);
}

}  // namespace eng
