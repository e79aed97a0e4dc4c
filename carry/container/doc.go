// Package container raises the network wall inside a local container's own network
// namespace, keeping the door on the host.
package container
