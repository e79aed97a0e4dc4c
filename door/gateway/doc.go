// Package gateway serves one door for many clients: each connection is
// attributed to a client by its proxy credentials (Proxy-Authorization:
// Basic NAME:TOKEN) and judged by that client's own policy, or the
// gateway's default; an operator changes the policies live through a
// management API, and watches the decisions as events, metrics and a
// dashboard.
//
// Choices worth knowing:
//
//   - Tokens are 256 random bits, stored as their SHA-256 only. A slow
//     password hash (argon2id, scrypt) defends guessable secrets; a random
//     256-bit token cannot be guessed, and the gateway checks a token on
//     every request of a kept connection, where a slow hash would cost
//     more than the request.
//   - Every request on a kept connection carries credentials and is checked;
//     a connection stays with the first client it named (a request naming
//     another is refused with 407), and the client's policy is read for
//     each request, so a change counts from the next one.
//   - The clients live in the records file. The gateway holds it only for
//     one transaction at a time, like every other postern process, so
//     'postern gateway clients add|rm' works beside a running gateway: the
//     gateway looks at the clients' version in the records a few times a
//     second and reloads them when it changed.
//   - Events are kept in memory, in a ring per client of a bounded size.
//     Followers of /v1/events get chunked JSON lines, one event a line
//     (not server-sent events: a browser's EventSource cannot send the
//     API's Authorization header, and fetch can read a stream of lines).
//   - /metrics is Prometheus' text format, written here: counters and one
//     histogram need no library.
package gateway
