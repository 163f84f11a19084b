// engine/base/file.h: opening, reading and creating the files a user points the engine at
// (datasets, checkpoints, compile-cache entries) without hanging, without reading without
// bound, and without writing through a planted symlink.
//
//   ENG_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, "data", kMaxDatasetBytes));
//
// Every function refuses what is not a regular file (a FIFO, a device such as /dev/zero, a
// directory, a socket) with a Status naming the path and what it is; opening never blocks
// (O_NONBLOCK until fstat has said the file is regular).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/base/limits.h"
#include "engine/base/status.h"

namespace eng {

// "a FIFO", "a directory", "a character device", ...: what st_mode is, for error messages.
std::string_view file_kind_name(unsigned mode);

// An open file descriptor, closed on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(o.release()) {}
  FileDescriptor& operator=(FileDescriptor&& o) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;  // -1: none
};

// A regular file opened for reading, and its size. Errors (what = "data", "checkpoint", ...):
// "<what>: cannot open '<path>': <reason>", "<what>: '<path>' is a FIFO, not a regular file".
struct OpenedFile {
  FileDescriptor fd;
  int64_t size = 0;
};
Result<OpenedFile> open_regular_file(const std::string& path, std::string_view what);

// Reads n bytes at offset; a short file is an error naming both sizes.
Status read_at(const OpenedFile& f, void* dst, int64_t n, int64_t offset, std::string_view what,
               const std::string& path);

// The whole of a regular file of at most max_bytes (larger: resource_exhausted naming both).
Result<std::string> read_regular_file(const std::string& path, std::string_view what,
                                      int64_t max_bytes);

// Creates a new temporary file beside final_path, named "<final_path>.tmp.<16 random hex
// digits>", with O_CREAT | O_EXCL | O_NOFOLLOW: it never opens an existing file or follows a
// symlink planted at that name. The caller writes, fsyncs, then renames it over final_path.
struct TempFile {
  FileDescriptor fd;
  std::string path;
};
Result<TempFile> create_temp_file(const std::string& final_path, std::string_view what);

// A name that stays under the directory it is joined to: relative, no ".." component, no NUL
// (run_name under base_output_directory). Error: "<what> '<name>' ...".
Status check_confined_name(std::string_view what, std::string_view name);

// 64 random bits (getrandom; a clock and pid mix where it is unavailable).
uint64_t random_u64();

}  // namespace eng
