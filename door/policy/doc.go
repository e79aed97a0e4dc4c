// Package policy compiles an HCL egress policy into a Policy, canonicalises host
// strings, and holds the hard floor: destinations no policy can open.
//
// The door judges in order: CanonicalHost (or SplitTarget) turns what a client
// wrote into a name or an address; DecideName judges a name before anything is
// resolved; DecideAddr judges each address a name resolved to, or a literal.
// Decisions are values; observe mode allows what enforce would deny and marks
// it WouldDeny, but never opens the hard floor.
//
// Choices worth knowing:
//
//   - "name" covers the name and every subdomain; "*.name" covers only the
//     subdomains; "*" alone is rejected (use mode = "observe").
//   - IP literals in allow or deny are rejected: addresses are opened by
//     allow_cidrs only. A name never opens a private address (RFC 1918,
//     100.64.0.0/10, fc00::/7, local-use NAT64 64:ff9b:1::/48).
//   - IPv4 hidden in IPv6 (mapped, IPv4-compatible, SIIT, NAT64, 6to4, Teredo
//     client and server) is judged as that IPv4 address, by the floor, by the
//     private ranges and by allow_cidrs alike.
//   - The floor includes the documentation ranges (192.0.2.0/24,
//     198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32, 3fff::/20), the
//     reserved 240.0.0.0/4, 192.0.0.0/24 and 192.88.99.0/24, and the fake-IP
//     ranges FakeIPv4 and FakeIPv6. Policy.WithSelf adds the door's own
//     addresses.
//   - allow_cidrs entries that lie entirely inside the floor are rejected when
//     parsed; wider ones (0.0.0.0/0) are accepted and the floor still applies.
//   - An inspect block names one host exactly, which an allow rule must cover;
//     DecideRequest judges the requests on it by method and by path.
//     NormalisePath decodes escapes (an encoded slash separates segments),
//     removes dot segments and empty ones, and the door forwards the path it
//     judged. In globs "*" stays within a segment and a "**" segment spans any
//     number of segments; deny_paths ignore letter case, allow_paths do not.
//     inject_header values are read from postern's own environment or a file
//     by the door, never written in the policy.
package policy
