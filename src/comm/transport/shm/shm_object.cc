#include "comm/transport/shm/shm_object.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace braid::comm {
namespace {

uint8_t* map_populated(int fd, size_t len) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

// Closes fd (and removes `name` when given) keeping errno.
uint8_t* fail(int fd, const char* unlink_name) {
  int e = errno;
  ::close(fd);
  if (unlink_name) ::shm_unlink(unlink_name);
  errno = e;
  return nullptr;
}

}  // namespace

uint8_t* shm_create(const std::string& name, size_t len, const char** step) {
  *step = "shm_open";
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  *step = "ftruncate";
  if (::ftruncate(fd, off_t(len)) != 0) return fail(fd, name.c_str());
  *step = "posix_fallocate";
  if (int e = ::posix_fallocate(fd, 0, off_t(len)); e != 0) {
    errno = e;
    return fail(fd, name.c_str());
  }
  *step = "mmap";
  uint8_t* base = map_populated(fd, len);
  if (!base) return fail(fd, name.c_str());
  ::close(fd);
  return base;
}

uint8_t* shm_attach(const std::string& name, size_t* len, const char** step) {
  *step = "shm_open";
  int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return nullptr;
  *step = "fstat";
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(fd, nullptr);
  *len = size_t(st.st_size);
  *step = "mmap";
  uint8_t* base = map_populated(fd, *len);
  if (!base) return fail(fd, nullptr);
  ::close(fd);
  return base;
}

}  // namespace braid::comm
