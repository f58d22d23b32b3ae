#include "plan/sim/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "braid/error.h"
#include "core/asan.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if BRAID_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace braid::plan::sim {

// AddressSanitizer keeps a shadow of every stack. Each switch tells it
// which stack runs next (start_switch before, finish_switch after), or it
// takes the fiber's frames for overruns of the thread's stack. A fiber's
// last frames never return, so their redzones stay poisoned: the stack's
// shadow is cleared before it is unmapped, or the next fiber mapped at the
// same address inherits them.
namespace {
#if BRAID_ASAN
void start_switch(void** fake_save, const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(fake_save, bottom, size);
}
void finish_switch(void* fake, const void** bottom, size_t* size) {
  __sanitizer_finish_switch_fiber(fake, bottom, size);
}
void unpoison(void* p, size_t n) { __asan_unpoison_memory_region(p, n); }
#else
void start_switch(void**, const void*, size_t) {}
void finish_switch(void*, const void**, size_t*) {}
void unpoison(void*, size_t) {}
#endif
}  // namespace

#if defined(__x86_64__)
// braid_sim_switch(save, load): pushes the callee-saved registers and the
// SSE/x87 control words, stores the stack pointer in *save, loads `load`,
// pops the same from there and returns into the other context.
extern "C" void braid_sim_switch(void** save, void* load);
asm(R"(
.text
.globl braid_sim_switch
.type braid_sim_switch,@function
braid_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size braid_sim_switch,.-braid_sim_switch

.globl braid_sim_trampoline
.type braid_sim_trampoline,@function
braid_sim_trampoline:
  movq %r12, %rdi
  callq *%rbx
  ud2
.size braid_sim_trampoline,.-braid_sim_trampoline
)");
extern "C" void braid_sim_trampoline();
#endif

Fiber::Fiber(std::function<void()> body, size_t stack_bytes) : body_(std::move(body)) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  stack_bytes = (stack_bytes + page - 1) / page * page;
  stack_bytes_ = stack_bytes;
  map_bytes_ = stack_bytes + page;
  stack_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1, 0);
  if (stack_ == MAP_FAILED) throw_errno("simulator: mapping a fiber stack");
  mprotect(stack_, page, PROT_NONE);  // guard page: an overflow faults
  auto top = reinterpret_cast<uintptr_t>(stack_) + map_bytes_;
#if defined(__x86_64__)
  // The frame braid_sim_switch pops: control words, r15..rbp, then the
  // return address (the trampoline, which calls entry(this) with the stack
  // 16-byte aligned at the call).
  auto* sp = reinterpret_cast<uint64_t*>(top & ~uintptr_t(15));
  *--sp = 0;  // two pads: the return-address slot sits at 8 mod 16, so
  *--sp = 0;  // the trampoline's call finds the stack 16-byte aligned
  *--sp = reinterpret_cast<uint64_t>(&braid_sim_trampoline);  // return address
  *--sp = 0;                                                 // rbp
  *--sp = reinterpret_cast<uint64_t>(&Fiber::entry);          // rbx
  *--sp = reinterpret_cast<uint64_t>(this);                  // r12
  *--sp = 0;                                                 // r13
  *--sp = 0;                                                 // r14
  *--sp = 0;                                                 // r15
  uint32_t words[2] = {0, 0};
  asm volatile("stmxcsr %0" : "=m"(words[0]));
  asm volatile("fnstcw %0" : "=m"(words[1]));
  uint64_t packed;
  std::memcpy(&packed, words, 8);
  *--sp = packed;
  sp_ = sp;
#else
  auto* uc = new ucontext_t;
  getcontext(uc);
  uc->uc_stack.ss_sp = static_cast<char*>(stack_) + page;
  uc->uc_stack.ss_size = stack_bytes;
  uc->uc_link = nullptr;
  makecontext(uc, reinterpret_cast<void (*)()>(&Fiber::entry), 1, this);
  sp_ = uc;
  (void)top;
#endif
}

Fiber::~Fiber() {
#if !defined(__x86_64__)
  delete static_cast<ucontext_t*>(sp_);
  delete static_cast<ucontext_t*>(caller_sp_);
#endif
  if (stack_ != nullptr) {
    unpoison(stack_lo(), stack_bytes_);
    munmap(stack_, map_bytes_);
  }
}

void Fiber::entry(void* self) {
  auto* f = static_cast<Fiber*>(self);
  finish_switch(nullptr, &f->caller_bottom_, &f->caller_size_);
  try {
    f->body_();
  } catch (...) {
    f->error_ = std::current_exception();
  }
  f->done_ = true;
  f->body_ = nullptr;
  f->yield();  // never resumed again
}

void Fiber::resume() {
  if (done_) return;
  void* fake = nullptr;
  start_switch(&fake, stack_lo(), stack_bytes_);
#if defined(__x86_64__)
  braid_sim_switch(&caller_sp_, sp_);
#else
  if (caller_sp_ == nullptr) caller_sp_ = new ucontext_t;
  swapcontext(static_cast<ucontext_t*>(caller_sp_), static_cast<ucontext_t*>(sp_));
#endif
  finish_switch(fake, nullptr, nullptr);
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void Fiber::yield() {
  // The last yield (done_) is never returned from: its fake frames go.
  void* fake = nullptr;
  start_switch(done_ ? nullptr : &fake, caller_bottom_, caller_size_);
#if defined(__x86_64__)
  braid_sim_switch(&sp_, caller_sp_);
#else
  swapcontext(static_cast<ucontext_t*>(sp_), static_cast<ucontext_t*>(caller_sp_));
#endif
  finish_switch(fake, &caller_bottom_, &caller_size_);
}

}  // namespace braid::plan::sim
