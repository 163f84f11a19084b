// engine/base/file.cpp: regular-file checks, bounded reads and exclusive temporary files.
#include "engine/base/file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "engine/base/hash.h"

namespace eng {

std::string_view file_kind_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
  }
  return "not a regular file";
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

Result<OpenedFile> open_regular_file(const std::string& path, std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  OpenedFile f;
  f.fd = FileDescriptor(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (f.fd.get() < 0)
    return not_found("{}: cannot open '{}': {}", what, path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd.get(), &st) != 0)
    return io_error("{}: cannot stat '{}': {}", what, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return failed_precondition("{}: '{}' is {}, not a regular file", what, path,
                               file_kind_name(st.st_mode));
  const int flags = ::fcntl(f.fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(f.fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  f.size = static_cast<int64_t>(st.st_size);
  return f;
}

Status read_at(const OpenedFile& f, void* dst, int64_t n, int64_t offset, std::string_view what,
               const std::string& path) {
  if (n < 0 || offset < 0 || offset > f.size || n > f.size - offset)
    return data_loss("{} '{}': truncated: {} bytes at offset {} but the file has {}", what, path, n,
                     offset, f.size);
  char* out = static_cast<char*>(dst);
  int64_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(f.fd.get(), out + got, static_cast<size_t>(n - got), offset + got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return io_error("{} '{}': read failed at byte {}: {}", what, path, offset + got,
                      r < 0 ? std::strerror(errno) : "unexpected end of file");
    got += r;
  }
  return ok_status();
}

Result<std::string> read_regular_file(const std::string& path, std::string_view what,
                                      int64_t max_bytes) {
  ENG_ASSIGN_OR_RETURN(OpenedFile f, open_regular_file(path, what));
  if (f.size > max_bytes)
    return resource_exhausted("{}: '{}' has {} bytes, more than the {} this reads", what, path,
                              f.size, max_bytes);
  std::string out(static_cast<size_t>(f.size), '\0');
  ENG_RETURN_IF_ERROR(read_at(f, out.data(), f.size, 0, what, path));
  return out;
}

Status check_confined_name(std::string_view what, std::string_view name) {
  if (!name.empty() && name.front() == '/')
    return invalid_argument("{} '{}' is an absolute path; it must stay under its directory", what,
                            name);
  if (name.find('\0') != std::string_view::npos)
    return invalid_argument("{} contains a NUL character", what);
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('/', start), name.size());
    if (name.substr(start, end - start) == "..")
      return invalid_argument("{} '{}' contains '..'; it must stay under its directory", what,
                              name);
    start = end + 1;
  }
  return ok_status();
}

uint64_t random_u64() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  static std::atomic<uint64_t> counter{0};
  return hash_mix(hash_mix(static_cast<uint64_t>(now), static_cast<uint64_t>(::getpid())),
                  counter.fetch_add(1));
}

Result<TempFile> create_temp_file(const std::string& final_path, std::string_view what) {
  TempFile t;
  for (int attempt = 0; attempt < 8; ++attempt) {
    t.path = fmt::format("{}.tmp.{:016x}", final_path, random_u64());
    t.fd = FileDescriptor(
        ::open(t.path.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0644));
    if (t.fd.get() >= 0) return t;
    if (errno != EEXIST) break;
  }
  return io_error("{}: cannot create '{}': {}", what, t.path, std::strerror(errno));
}

}  // namespace eng
