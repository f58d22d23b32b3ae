// POSIX shared-memory objects: what the shm wire's segments and
// Communicator::alloc_shared memory have in common. Both return nullptr on
// failure, with errno set and `step` naming the call that failed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid::comm {

// Creates `name` (exclusively), sizes it to `len` bytes with the pages
// reserved — posix_fallocate, so a /dev/shm too small for them fails here
// and not with SIGBUS on first touch — and maps it, populated. A failure
// after the object exists removes the name again.
uint8_t* shm_create(const std::string& name, size_t len, const char** step);

// Maps the whole of an existing object, populated; `len` receives its size.
uint8_t* shm_attach(const std::string& name, size_t* len, const char** step);

}  // namespace braid::comm
