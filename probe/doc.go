// Package probe measures a machine: each rung performs the real act (create a
// namespace, redirect a connection, restrict with Landlock) and reports what happened.
package probe
