// Copies one rank's output stream to the launcher's, a whole line at a time,
// each line prefixed with the rank ("[3] "). Partial lines wait for their
// newline (or for 64 KiB, or for the end of the stream), so lines from
// different ranks never interleave mid-line.
#pragma once

#include <string>

namespace braid::launch {

class LinePrefixer {
 public:
  // `show` false: read and discard (the stream must still be drained).
  LinePrefixer(std::string prefix, int out_fd, bool show)
      : prefix_(std::move(prefix)), out_(out_fd), show_(show) {}

  // Reads what `fd` has now (non-blocking) and writes the complete lines.
  // Returns false once the stream has ended.
  bool pump(int fd);
  // Writes a pending partial line, with a newline.
  void finish();

 private:
  void emit(const char* p, size_t n);

  std::string prefix_;
  int out_;
  bool show_;
  std::string partial_;
};

// write(2) all of it, waiting out EAGAIN; gives up quietly if the reader
// went away (a closed pipe must not kill the launcher).
void write_all_fd(int fd, const char* p, size_t n);

}  // namespace braid::launch
