// Package testhosts makes throwaway hosts for tests, the demo and benchmarks: network
// namespaces with their own 10.x addresses over veth, running real servers. Nothing it
// makes is reachable beyond this machine, and everything it makes is removed on Close.
//
// For differential tests the hosts run servers nobody here wrote (Debian's
// nginx, Python's http.server) and a raw HTTP/1.x server that frames, cuts and
// times its responses on purpose; Body and BodySHA256 say what they serve.
// Fixtures (an apt repository, a pip index, an npm registry, a GOPROXY
// directory, a git repository) are built into a directory nginx serves, and
// each has a Fetch that runs the real client (apt-get, pip, npm, go, git) with
// its own integrity checks, as a Client says: directly, through a proxy, or
// behind a command prefix.
package testhosts
