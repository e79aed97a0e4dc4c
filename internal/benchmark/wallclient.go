//go:build linux

package benchmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

// wallClientEnv turns the benchmark binary into the measuring client of the
// wall benchmark. The same client runs in a plain network namespace (direct)
// and as the command of `postern run` (through the wall), so both paths are
// measured by identical code.
const wallClientEnv = "POSTERN_WALLBENCH_CLIENT"

// clientJob is what one client run measures; it travels as JSON in the
// environment.
type clientJob struct {
	Bulk         string `json:"bulk"` // host:port of a bulk server
	BulkBytes    int64  `json:"bulk_bytes"`
	BulkRuns     int    `json:"bulk_runs"`
	Echo         string `json:"echo"` // host:port of an echo server
	SetupSamples int    `json:"setup_samples"`
}

// clientResult is what the client prints on stdout, as one JSON object.
type clientResult struct {
	BulkRates []float64       `json:"bulk_rates"` // bytes per second, one per run
	Setup     []time.Duration `json:"setup"`      // sorted
}

// WallClientRequested reports whether this process was started as the wall
// benchmark's client. A main that uses RunWall must check it first and call
// ServeWallClient.
func WallClientRequested() bool { return os.Getenv(wallClientEnv) != "" }

// ServeWallClient runs the job in the environment and writes the result to w.
func ServeWallClient(ctx context.Context, w io.Writer) error {
	var job clientJob
	if err := json.Unmarshal([]byte(os.Getenv(wallClientEnv)), &job); err != nil {
		return fmt.Errorf("wall client: read job from %s: %w", wallClientEnv, err)
	}
	res, err := runClient(ctx, job)
	if err != nil {
		return fmt.Errorf("wall client: %w", err)
	}
	return json.NewEncoder(w).Encode(res)
}

func runClient(ctx context.Context, job clientJob) (clientResult, error) {
	var res clientResult
	buf := make([]byte, 256<<10)
	var d net.Dialer
	for i := 0; i < job.BulkRuns; i++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		c, err := d.DialContext(cctx, "tcp", job.Bulk)
		if err != nil {
			cancel()
			return res, fmt.Errorf("dial bulk %s: %w", job.Bulk, err)
		}
		c.SetDeadline(time.Now().Add(2 * time.Minute))
		start := time.Now()
		err = fetch(c, buf, job.BulkBytes)
		el := time.Since(start)
		c.Close()
		cancel()
		if err != nil {
			return res, fmt.Errorf("bulk from %s: %w", job.Bulk, err)
		}
		res.BulkRates = append(res.BulkRates, float64(job.BulkBytes)/el.Seconds())
	}

	one := func() (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		c, err := d.DialContext(cctx, "tcp", job.Echo)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		if _, err := c.Write([]byte{'x'}); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return 0, err
		}
		if b[0] != 'x' {
			return 0, errors.New("echo server sent a different byte back")
		}
		return time.Since(start), nil
	}
	for i := 0; i < job.SetupSamples/20+5; i++ { // warm up
		if _, err := one(); err != nil {
			return res, fmt.Errorf("connect to echo %s: %w", job.Echo, err)
		}
	}
	for i := 0; i < job.SetupSamples; i++ {
		dur, err := one()
		if err != nil {
			return res, fmt.Errorf("connect to echo %s (sample %d): %w", job.Echo, i, err)
		}
		res.Setup = append(res.Setup, dur)
	}
	slices.Sort(res.Setup)
	return res, nil
}
