// Package benchmark measures the door as a proxy against direct connections and
// against squid and tinyproxy, side by side in one run, on loopback and test
// hosts only: bulk throughput through a CONNECT tunnel, added connection-setup
// latency, keep-alive requests per second, and memory per idle tunnel. Results
// are ratios to direct (or between proxies), so they travel between machines
// better than absolute figures.
package benchmark
