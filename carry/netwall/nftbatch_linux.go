package netwall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// batchConn queues the wall's table with the nftables package and commits it
// as one batch of its own, asking the kernel to acknowledge only the last
// message. The package's own commit asks for an acknowledgement of every
// message and reads each with two receives (a peek for its size, then the
// read): some forty system calls per run where one send and one receive do.
// The kernel still answers every message that fails, whatever it asked
// for, and processes the rest of the batch before answering, so nothing
// that goes wrong is missed; a failed batch changes nothing.
type batchConn struct {
	*nftables.Conn
	queued []netlink.Message
}

func newBatchConn() (*batchConn, error) {
	b := &batchConn{}
	conn, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		b.queued = append(b.queued, req...)
		// No answers at all: the package then reads none for any message
		// and reports nothing. (An error here would come back once per
		// message, each joined to the ones before and formatted whole:
		// 0.17 ms of a run's CPU for a message nobody reads.)
		return nil, io.EOF
	}))
	if err != nil {
		return nil, err
	}
	b.Conn = conn
	return b, nil
}

// Flush commits what is queued.
func (b *batchConn) Flush() error {
	err := b.Conn.Flush()
	msgs := b.queued
	b.queued = nil
	switch {
	case err != nil:
		return err // the package could not encode what was queued
	case len(msgs) == 0:
		return errors.New("nftables: nothing was queued")
	}
	return commitBatch(msgs)
}

// commitBatch sends msgs (a batch: its begin, the messages, its end) on a
// netfilter netlink socket of its own and waits for the last message's
// answer, collecting every error the kernel reports on the way.
func commitBatch(msgs []netlink.Message) error {
	if len(msgs) < 3 || msgs[0].Header.Type != unix.NFNL_MSG_BATCH_BEGIN || msgs[len(msgs)-1].Header.Type != unix.NFNL_MSG_BATCH_END {
		return fmt.Errorf("nftables: not a batch (%d messages)", len(msgs))
	}
	last := len(msgs) - 2
	var out []byte
	for i, m := range msgs {
		m.Header.Sequence = uint32(i + 1)
		m.Header.PID = 0
		m.Header.Flags &^= netlink.Acknowledge
		if i == last {
			m.Header.Flags |= netlink.Acknowledge
		}
		b, err := m.MarshalBinary()
		if err != nil {
			return fmt.Errorf("nftables: encode message %d: %w", i, err)
		}
		out = append(out, b...)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("nftables: netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// The kernel answers within the send; the bound is for a kernel that
	// would not.
	tv := unix.Timeval{Sec: 10}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("nftables: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nftables: bind netlink socket: %w", err)
	}
	for {
		err = unix.Sendto(fd, out, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("nftables: send batch: %w", err)
	}
	return readBatchAnswers(fd, uint32(last+1), msgs)
}

// readBatchAnswers reads the kernel's answers to a batch until the one to
// the message numbered lastSeq, or one to the batch's begin (which the
// kernel sends alone when it could not hold the batch's errors).
func readBatchAnswers(fd int, lastSeq uint32, msgs []netlink.Message) error {
	buf := make([]byte, 64<<10)
	var errs []error
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("nftables: read the batch's answer: %w", err))...)
		}
		done, err := batchAnswers(buf[:n], lastSeq, msgs, &errs)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if done {
			return errors.Join(errs...)
		}
	}
}

// batchAnswers parses one datagram of answers, adding each error it reports
// to errs; done is whether the batch's answer is complete.
func batchAnswers(b []byte, lastSeq uint32, msgs []netlink.Message, errs *[]error) (done bool, err error) {
	for len(b) > 0 {
		if len(b) < unix.NLMSG_HDRLEN {
			return false, fmt.Errorf("nftables: the kernel's answer: %d bytes left, short of a header", len(b))
		}
		size := binary.NativeEndian.Uint32(b[0:4])
		typ := binary.NativeEndian.Uint16(b[4:6])
		seq := binary.NativeEndian.Uint32(b[8:12])
		if size < unix.NLMSG_HDRLEN || uint64(size) > uint64(len(b)) {
			return false, fmt.Errorf("nftables: the kernel's answer: a message of %d bytes in %d", size, len(b))
		}
		data := b[unix.NLMSG_HDRLEN:size]
		b = b[min(uint64(len(b)), (uint64(size)+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1)):]
		if typ != unix.NLMSG_ERROR {
			continue
		}
		if len(data) < 4 {
			return false, errors.New("nftables: the kernel's answer: a short error message")
		}
		if code := int32(binary.NativeEndian.Uint32(data[0:4])); code != 0 {
			what := "the batch"
			if seq > 1 && int(seq) <= len(msgs) {
				what = fmt.Sprintf("message %d of %d (%s)", seq-1, len(msgs)-2, nftMessageName(msgs[seq-1].Header.Type))
			}
			*errs = append(*errs, fmt.Errorf("%s: %w", what, syscall.Errno(-code)))
		}
		if seq == lastSeq || seq == 1 {
			return true, nil
		}
	}
	return false, nil
}

// nftMessageName names a netfilter message type for an error.
func nftMessageName(t netlink.HeaderType) string {
	switch int(t) & 0xff {
	case unix.NFT_MSG_NEWTABLE:
		return "new table"
	case unix.NFT_MSG_NEWCHAIN:
		return "new chain"
	case unix.NFT_MSG_NEWRULE:
		return "new rule"
	case unix.NFT_MSG_NEWSET:
		return "new set"
	case unix.NFT_MSG_NEWSETELEM:
		return "new set elements"
	case unix.NFT_MSG_DELTABLE:
		return "delete table"
	}
	return fmt.Sprintf("type %#x", int(t))
}
