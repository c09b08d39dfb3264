// watch_fork: a job-control parent for internal/stopped's Follow tests. For
// each command "f" on standard input it forks a child that holds itself as
// the BPF side holds a followed child (a SIGSTOP whose si_code is
// SI_KERNEL: a process may send itself any siginfo), then prints
// "child PID" and exits 0 once it runs again. The parent waits for it with
// WUNTRACED, as an interactive shell does, and prints "stopped PID" if it
// saw it stop (what the Follow watch must prevent) or "exited PID STATUS".
// "t" makes a thread fork the child instead of the main thread; "d" makes
// the child wait 300 ms before it holds itself. "x" forks the parent itself,
// as a daemon does: the parent prints "forked PID" and exits 0, and the new
// process goes on reading commands.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t spawn(int delay)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (delay)
			usleep(300000);
		siginfo_t si;
		memset(&si, 0, sizeof si);
		si.si_signo = SIGSTOP;
		si.si_code = 0x80; // SI_KERNEL
		syscall(SYS_rt_sigqueueinfo, getpid(), SIGSTOP, &si);
		printf("child %d\n", getpid());
		fflush(stdout);
		_exit(0);
	}
	return pid;
}

static void *spawner(void *arg)
{
	*(pid_t *)arg = spawn(0);
	return NULL;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d\n", getpid());
	char line[16];
	while (fgets(line, sizeof line, stdin)) {
		pid_t pid = -1;
		if (line[0] == 'f' || line[0] == 'd') {
			pid = spawn(line[0] == 'd');
		} else if (line[0] == 'x') {
			pid_t kid = fork();
			if (kid > 0) {
				printf("forked %d\n", kid);
				exit(0);
			}
			continue;
		} else if (line[0] == 't') {
			pthread_t t;
			pthread_create(&t, NULL, spawner, &pid);
			pthread_join(t, NULL);
		} else {
			continue;
		}
		int st;
		if (waitpid(pid, &st, WUNTRACED) != pid) {
			printf("waitpid failed\n");
			continue;
		}
		if (WIFSTOPPED(st)) {
			printf("stopped %d\n", pid);
			kill(pid, SIGCONT);
			waitpid(pid, &st, 0);
		} else {
			printf("exited %d %d\n", pid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		}
	}
	return 0;
}
