// Package wallimage attaches the wall's init, an executable of its own
// (cmd/postern-wall), to the end of the postern binary, and finds it there.
//
// Every walled run starts its init. Re-executing postern itself for it means
// starting a binary of every command, library and package initialiser
// postern has; the init needs a fraction of them. A build attaches the small
// init after postern's last byte, where the loader never looks, with a
// trailer naming its length and SHA-256. A binary without one (go build
// alone, or a stripped copy) runs its walls by re-executing itself, as
// before.
package wallimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// magic opens the trailer.
var magic = [16]byte{'p', 'o', 's', 't', 'e', 'r', 'n', ' ', 'w', 'a', 'l', 'l', 'i', 'n', 'i', 't'}

// TrailerSize is the trailer's length: magic, the image's length (8 bytes,
// little-endian), its SHA-256 and 8 bytes kept at zero.
const TrailerSize = 16 + 8 + sha256.Size + 8

// maxImage bounds an image a trailer may claim.
const maxImage = 256 << 20

// Image is an init found at the end of an executable.
type Image struct {
	Offset, Size int64
	Sum          [sha256.Size]byte
}

// ErrNone says the executable has no image attached.
var ErrNone = errors.New("no wall init attached")

// Find reads the trailer at the end of f, whose length is size.
func Find(f io.ReaderAt, size int64) (Image, error) {
	if size < TrailerSize {
		return Image{}, ErrNone
	}
	var t [TrailerSize]byte
	if _, err := f.ReadAt(t[:], size-TrailerSize); err != nil {
		return Image{}, fmt.Errorf("read the trailer: %w", err)
	}
	if !bytes.Equal(t[:16], magic[:]) {
		return Image{}, ErrNone
	}
	n := binary.LittleEndian.Uint64(t[16:24])
	if n == 0 || n > maxImage || int64(n) > size-TrailerSize {
		return Image{}, fmt.Errorf("the trailer claims an image of %d bytes in a file of %d", n, size)
	}
	img := Image{Offset: size - TrailerSize - int64(n), Size: int64(n)}
	copy(img.Sum[:], t[24:24+sha256.Size])
	return img, nil
}

// Attach appends the executable at image to the binary at exe, with its
// trailer. A binary that already has one gets it replaced.
func Attach(exe, image string) error {
	data, err := os.ReadFile(image)
	if err != nil {
		return err
	}
	if len(data) == 0 || len(data) > maxImage {
		return fmt.Errorf("%s: %d bytes is no wall init", image, len(data))
	}
	f, err := os.OpenFile(exe, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	end := st.Size()
	if old, err := Find(f, end); err == nil {
		end = old.Offset
	} else if !errors.Is(err, ErrNone) {
		return fmt.Errorf("%s: %w", exe, err)
	}
	sum := sha256.Sum256(data)
	var t [TrailerSize]byte
	copy(t[:16], magic[:])
	binary.LittleEndian.PutUint64(t[16:24], uint64(len(data)))
	copy(t[24:], sum[:])
	if _, err := f.WriteAt(append(data, t[:]...), end); err != nil {
		return err
	}
	if err := f.Truncate(end + int64(len(data)) + TrailerSize); err != nil {
		return err
	}
	return f.Close()
}
