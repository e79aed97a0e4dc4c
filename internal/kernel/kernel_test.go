package kernel

import "testing"

func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"6.14.0", true}, {"6.18.44-fc-v1045", true}, {"7.0.1", true}, {"6.13.12-arch1", false},
		{"5.15.0-91-generic", false}, {"6.14-rc1", true}, {"6", false}, {"", false}, {"x.y", false},
	} {
		if got := ReleaseAtLeast(c.release, 6, 14); got != c.want {
			t.Errorf("ReleaseAtLeast(%q, 6, 14) = %v, want %v", c.release, got, c.want)
		}
	}
}
