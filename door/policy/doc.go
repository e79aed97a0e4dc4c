// Package policy compiles an HCL egress policy into a Policy, canonicalises host
// strings, and holds the hard floor: destinations no policy can open.
package policy
