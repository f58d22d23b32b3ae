// Fiber: a cooperative thread of its own stack, switched to and from by
// hand, for the simulator's ranks (thousands of them in one thread).
//
// A fiber runs `body` on a stack of `stack_bytes` (mapped lazily, with a
// guard page below it) when first resumed, and runs until it calls
// yield() or its body returns; resume() returns then. An exception thrown
// by the body is kept and rethrown by resume(). Not thread-safe: a fiber is
// resumed from the thread that created it. On x86-64 the switch is a few
// instructions (callee-saved registers and the stack pointer); elsewhere
// it falls back to ucontext.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>

namespace braid::plan::sim {

class Fiber {
 public:
  explicit Fiber(std::function<void()> body, size_t stack_bytes = 256 << 10);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the fiber until it yields or ends. Rethrows what its body threw.
  void resume();
  // From inside the fiber: back to whoever resumed it.
  void yield();
  bool done() const { return done_; }

 private:
  static void entry(void* self);
  // The lowest byte of the stack proper, above the guard page.
  char* stack_lo() const { return static_cast<char*>(stack_) + (map_bytes_ - stack_bytes_); }
  std::function<void()> body_;
  void* stack_ = nullptr;
  size_t map_bytes_ = 0;    // the guard page and the stack above it
  size_t stack_bytes_ = 0;
  void* sp_ = nullptr;         // the fiber's saved context
  void* caller_sp_ = nullptr;  // the resumer's saved context
  const void* caller_bottom_ = nullptr;  // the resumer's stack, for
  size_t caller_size_ = 0;               // AddressSanitizer's switches
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace braid::plan::sim
