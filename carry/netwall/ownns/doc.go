// Package ownns puts `postern run`, started by a user without privileges,
// into a user namespace of its own before anything else of postern runs, so
// that postern can set the run's wall up itself, as it does for root.
//
// The namespaces a wall needs take CAP_SYS_ADMIN, which such a user holds
// only in a user namespace of its own, and a process of more than one thread
// (every Go program, from before its first line) may not enter one. So the
// wall of such a user's run was set up by a second Go program, the wall's Go
// init, cloned into a new user namespace: its start, its threads and its exit
// cost the processors about as much as postern's own.
//
// Enter, called from the command's first package initialiser, execs the
// wall's small pid 1 in its launch mode instead: one thread and no runtime,
// it makes the user namespace, maps the user's own uid and gid into it and
// nothing else, keeps the wall's capabilities across its exec (as
// inheritable and ambient ones) and execs postern again: the same process,
// with the same arguments, descriptors, terminal, cgroup and parent. postern
// then holds those capabilities in a namespace that owns nothing of the
// host's, and netwall sets the run up on postern's own threads.
//
// The package imports nothing but syscall, so that Enter runs before the
// package initialisers of the rest of postern, which the first image would
// otherwise pay for only to be replaced.
package ownns
