package testhosts

import (
	"context"
	"testing"
	"time"
)

// NewTestLab is NewLab for a test: it needs root (see RequireRoot), fails the
// test if the lab cannot be made, and closes the lab when the test ends,
// failing the test if anything it made could not be removed.
func NewTestLab(t testing.TB, prefix string) *Lab {
	t.Helper()
	RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lab, err := NewLab(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("close test lab %s: %v", prefix, err)
		}
	})
	return lab
}
