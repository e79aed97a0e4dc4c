package dispatch

import "testing"

func TestParseProbeImages(t *testing.T) {
	out := "image podman localhost/postern-probe:0123456789abcdef\n" +
		"image podman localhost/postern-probe:0123456789abcdef\n" + // twice: once
		"image docker localhost/postern-probe:fedcba9876543210\n" +
		"image podman localhost/postern-probe:latest\n" + // not the probe's tag
		"image sh localhost/postern-probe:0123456789abcdef\n" + // no such engine
		"image podman docker.io/library/alpine:3\n"
	got := parseProbeImages(out)
	if len(got) != 2 || got[0].Engine != "podman" || got[1].Engine != "docker" || got[1].What != "localhost/postern-probe:fedcba9876543210" {
		t.Fatalf("got %+v", got)
	}
}

func FuzzParseProbeImages(f *testing.F) {
	f.Add("image podman localhost/postern-probe:0123456789abcdef\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, l := range parseProbeImages(s) {
			if !probeImageRef().MatchString(l.What) || (l.Engine != "podman" && l.Engine != "docker") {
				t.Fatalf("%q gave %+v", s, l)
			}
		}
	})
}
