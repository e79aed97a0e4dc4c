// Package workspace carries a run's work to its machine and its result home.
//
// Shipping, on the controller: HEAD's history as a git bundle of only what
// the machine's cache lacks, and a snapshot of the work tree (what differs
// from HEAD: changed and untracked, not ignored files, as a tar stream, and
// the files deleted). On the machine: a bare cache per repository, a fresh
// work tree per run whose objects are borrowed from the cache, HEAD checked
// out and the snapshot laid over it, so the run sees what the person sees.
// Once a run's result is home its work tree becomes the repository's spare,
// which the next run there resets to its base instead of checking out
// every file, keeping nothing of the earlier run's repository.
//
// The result, on the machine: the run's commits plus one commit of what it
// left uncommitted, made with plumbing (no hooks, no config of the run's
// obeyed) and sent home as a bundle of one ref. On the controller the bundle's
// objects are unpacked and exactly one ref, refs/heads/postern/RUN, is
// created; nothing else in the caller's repository changes.
package workspace
