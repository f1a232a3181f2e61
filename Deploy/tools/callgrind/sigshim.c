/* Valgrind 3.19 writes into the signal mask rt_sigsuspend is given (it removes its own signal from
 * it); libdispatch passes a constant mask, so valgrind crashed on the write. Preloaded, this copies
 * the mask to the stack first. For instruction counts only (Protocol/messages.md 11.6, session 12). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>

int sigsuspend(const sigset_t *mask) {
    static int (*real)(const sigset_t *);
    sigset_t copy = *mask;
    if (!real) real = (int (*)(const sigset_t *))dlsym(RTLD_NEXT, "sigsuspend");
    return real(&copy);
}
