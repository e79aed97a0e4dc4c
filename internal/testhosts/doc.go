// Package testhosts makes throwaway hosts for tests, the demo and benchmarks: network
// namespaces with their own 10.x addresses over veth, running real servers. Nothing it
// makes is reachable beyond this machine, and everything it makes is removed on Close.
package testhosts
