/* The pod sandbox's process: holds the pod's namespaces, reaps the zombies
 * of processes that share its PID namespace, and exits on SIGINT or SIGTERM.
 * Built static by build.rs and packed by the agent as its pause image. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    if (sigaction(SIGINT, &on_stop, NULL) || sigaction(SIGTERM, &on_stop, NULL) ||
        sigaction(SIGCHLD, &on_child, NULL)) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
