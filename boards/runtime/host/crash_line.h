/* The "#ondevice crash" line: where a hosted binary was when a fatal signal struck, as
 * addresses the plugin turns into functions and file:line with the binary's ELF (the
 * binary itself has no symbols to spare, and a signal handler cannot look them up).
 *
 *   #ondevice crash SIGSEGV pc=0x... [lr=0x...] [base=0x...] [frames=0x...,0x...]
 *
 * pc: the instruction that faulted; lr: the return address in the link register (or on
 * top of the stack when pc is near 0: a call through a null pointer); base: where the
 * ELF header was loaded (a PIE's load address); frames: the callers' return addresses,
 * innermost first. Only what is async-signal-safe once warmed up: write(2) and the
 * unwinder (warmed in a constructor, so its first-use set-up is not in the handler).
 *
 * The frames come from libgcc's unwinder, which every glibc link has (libgcc_s, or
 * libgcc_eh in a static binary); another libc (musl under zig, bionic) may be linked
 * without one: there the line has pc and lr only. */
#ifndef ONDEVICE_CRASH_LINE_H
#define ONDEVICE_CRASH_LINE_H
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>
#if defined(__GLIBC__)
#define ONDEVICE_UNWIND 1
#include <unwind.h>
#else
#define ONDEVICE_UNWIND 0
#endif

#include "../common/put.h"

#define ONDEVICE_CRASH_FRAMES 32

extern const char __ehdr_start[] __attribute__((weak, visibility("hidden"))); /* the linker's */

struct ondevice_unwound {
  uintptr_t ip[ONDEVICE_CRASH_FRAMES + 8];
  int before_insn[ONDEVICE_CRASH_FRAMES + 8]; /* 1: the frame a signal interrupted (ip is exact) */
  int n;
};

#if ONDEVICE_UNWIND

static _Unwind_Reason_Code ondevice_unwind_step(struct _Unwind_Context *ctx, void *arg) {
  struct ondevice_unwound *u = arg;
  int before = 0;
  uintptr_t ip = (uintptr_t)_Unwind_GetIPInfo(ctx, &before);
  if (u->n >= (int)(sizeof u->ip / sizeof u->ip[0])) return _URC_END_OF_STACK;
  u->ip[u->n] = ip;
  u->before_insn[u->n] = before;
  u->n++;
  return ip == 0 ? _URC_END_OF_STACK : _URC_NO_REASON;
}

static volatile sig_atomic_t ondevice_unwind_ready;

/* A first unwind before any crash: the unwinder's one-time set-up (loading libgcc_s,
 * binding its symbols) happens here, not inside a signal handler. A constructor of default
 * priority: in a static glibc binary the unwinder aborts when asked before libc's own
 * constructors ran; a crash before this one gets no frames. */
__attribute__((constructor)) static void ondevice_unwind_warm(void) {
  struct ondevice_unwound u;
  u.n = 0;
  _Unwind_Backtrace(ondevice_unwind_step, &u);
  ondevice_unwind_ready = 1;
}

static void ondevice_unwind(struct ondevice_unwound *u) {
  u->n = 0;
  if (ondevice_unwind_ready) _Unwind_Backtrace(ondevice_unwind_step, u);
}
#else
static void ondevice_unwind(struct ondevice_unwound *u) { u->n = 0; }
#endif

/* pc and lr from the interrupted context, where this architecture's layout is known
 * (returns 0 where it is not). */
static int ondevice_context_regs(void *context, uintptr_t *pc, uintptr_t *lr) {
  ucontext_t *uc = context;
  *pc = *lr = 0;
  if (uc == NULL) return 0;
#if defined(__x86_64__) && defined(REG_RIP)
  *pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
  if (*pc < 4096) *lr = *(const uintptr_t *)uc->uc_mcontext.gregs[REG_RSP]; /* the call's return address */
#elif defined(__i386__) && defined(REG_EIP)
  *pc = (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
  if (*pc < 4096) *lr = *(const uintptr_t *)uc->uc_mcontext.gregs[REG_ESP];
#elif defined(__aarch64__)
  *pc = (uintptr_t)uc->uc_mcontext.pc;
  *lr = (uintptr_t)uc->uc_mcontext.regs[30];
#elif defined(__arm__)
  *pc = (uintptr_t)uc->uc_mcontext.arm_pc;
  *lr = (uintptr_t)uc->uc_mcontext.arm_lr;
#elif defined(__riscv) && defined(REG_PC)
  *pc = (uintptr_t)uc->uc_mcontext.__gregs[REG_PC];
  *lr = (uintptr_t)uc->uc_mcontext.__gregs[REG_RA];
#else
  (void)uc;
  return 0;
#endif
  return 1;
}

static char *ondevice_put_addr(char *p, uintptr_t v) {
  *p++ = '0';
  *p++ = 'x';
  int digits = 1;
  while (digits < (int)(2 * sizeof v) && (v >> (4 * digits)) != 0) digits++;
  for (int i = digits - 1; i >= 0; --i) *p++ = "0123456789abcdef"[(v >> (4 * i)) & 0xF];
  return p;
}

static const char *ondevice_signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    case SIGTRAP: return "SIGTRAP";
#ifdef SIGSYS
    case SIGSYS: return "SIGSYS";
#endif
    default: return "SIG?";
  }
}

/* The line, into buf (at least 96 + 20 * ONDEVICE_CRASH_FRAMES bytes); returns its length. */
static size_t ondevice_crash_line(char *buf, int sig, void *context) {
  uintptr_t pc, lr;
  int pc_known = ondevice_context_regs(context, &pc, &lr);
  struct ondevice_unwound u;
  ondevice_unwind(&u);
  /* the handler's own frames and the signal trampoline come first: the interrupted frame
   * is the one at pc (or, where pc is not known, the one the unwinder marks as exact) */
  int at = -1;
  for (int i = 0; i < u.n && at < 0 && pc_known; i++)
    if (u.ip[i] == pc) at = i;
  for (int i = 0; i < u.n && at < 0; i++)
    if (u.before_insn[i]) at = i;
  if (!pc_known && at >= 0) pc = u.ip[at], pc_known = 1;
  char *p = buf;
  p = put_str(p, "\n#ondevice crash ");
  p = put_str(p, ondevice_signal_name(sig));
  if (pc_known) {
    p = put_str(p, " pc=");
    p = ondevice_put_addr(p, pc);
  }
  if (lr) {
    p = put_str(p, " lr=");
    p = ondevice_put_addr(p, lr);
  }
  if (__ehdr_start) {
    p = put_str(p, " base=");
    p = ondevice_put_addr(p, (uintptr_t)__ehdr_start);
  }
  if (at >= 0 && at + 1 < u.n) {
    p = put_str(p, " frames=");
    for (int i = at + 1, k = 0; i < u.n && k < ONDEVICE_CRASH_FRAMES && u.ip[i]; i++, k++) {
      if (k) *p++ = ',';
      p = ondevice_put_addr(p, u.ip[i]);
    }
  }
  *p++ = '\n';
  return (size_t)(p - buf);
}
#endif
