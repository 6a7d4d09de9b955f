package ptx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Containers nvcc and the CUDA runtime produce around PTX.
const (
	fatbinMagic        = 0xba55ed50 // fatbin container header
	fatbinWrapperMagic = 0x466243b1 // __fatBinC_Wrapper_t, also relocatable fatbins
	fatbinKindPTX      = 1
	fatbinFlagLZ4      = 0x2000
	fatbinFlagZstd     = 0x8000
	zstdMagic          = 0xfd2fb528
	// maxPTXBytes bounds a decompressed entry so that a hostile image
	// cannot make the worker allocate without limit.
	maxPTXBytes = 256 << 20
	// DeviceSM is the compute capability whose PTX the emulator prefers.
	DeviceSM = 90
)

// ptxCandidate is one PTX text found in an image, with the virtual
// architecture it was compiled for.
type ptxCandidate struct {
	arch int
	text string
}

// containerInfo records what an image held besides usable PTX, for the
// error message when nothing fits.
type containerInfo struct {
	ptx  []ptxCandidate
	sass []int
}

// extractPTX finds the PTX to run in image: the text itself, or the PTX
// entry with the highest architecture not above DeviceSM inside a fatbin
// or an ELF (cubin, object or executable) that embeds one.
func extractPTX(image []byte) (string, error) {
	if len(image) == 0 {
		return "", cu.Errorf(cu.ErrorInvalidImage, "empty module image")
	}
	info := &containerInfo{}
	var err error
	switch {
	case bytes.HasPrefix(image, []byte("\x7fELF")):
		err = info.scanELF(image)
	case len(image) >= 8 && (binary.LittleEndian.Uint32(image) == fatbinMagic || binary.LittleEndian.Uint32(image) == fatbinWrapperMagic):
		err = info.scanFatbins(image)
	case looksLikePTX(image):
		text := image
		if i := bytes.IndexByte(text, 0); i >= 0 {
			text = text[:i]
		}
		return string(text), nil
	default:
		return "", cu.Errorf(cu.ErrorInvalidImage, "module image is neither PTX text, a fatbin nor an ELF cubin (starts with % x)", image[:min(len(image), 8)])
	}
	if err != nil {
		return "", err
	}
	return info.pick()
}

func looksLikePTX(b []byte) bool {
	head := b[:min(len(b), 1<<16)]
	if i := bytes.IndexByte(head, 0); i >= 0 {
		head = head[:i]
	}
	return bytes.Contains(head, []byte(".version")) || bytes.Contains(head, []byte(".entry")) || bytes.Contains(head, []byte(".target"))
}

func (info *containerInfo) pick() (string, error) {
	if len(info.ptx) == 0 {
		what := "no PTX"
		if len(info.sass) > 0 {
			sort.Ints(info.sass)
			var archs []string
			for _, a := range info.sass {
				archs = append(archs, fmt.Sprintf("sm_%d", a))
			}
			what = "only machine code for " + strings.Join(archs, ", ") + " and no PTX"
		}
		return "", cu.Errorf(cu.ErrorNoBinaryForGPU,
			"the module holds %s; the emulated device runs PTX only: rebuild with -gencode arch=compute_%d,code=compute_%d (or any compute_XX up to %d) so that nvcc embeds PTX",
			what, DeviceSM, DeviceSM, DeviceSM)
	}
	best := -1
	for i, c := range info.ptx {
		if c.arch <= DeviceSM && (best < 0 || c.arch > info.ptx[best].arch) {
			best = i
		}
	}
	if best < 0 {
		var archs []string
		for _, c := range info.ptx {
			archs = append(archs, fmt.Sprintf("compute_%d", c.arch))
		}
		return "", cu.Errorf(cu.ErrorNoBinaryForGPU,
			"the module's PTX targets %s, newer than the emulated device (compute_%d): rebuild with -gencode arch=compute_%d,code=compute_%d",
			strings.Join(archs, ", "), DeviceSM, DeviceSM, DeviceSM)
	}
	return info.ptx[best].text, nil
}

// scanELF looks through an ELF file's sections for fatbins and PTX.
func (info *containerInfo) scanELF(image []byte) (err error) {
	defer func() {
		// debug/elf is not hardened against every malformed file.
		if r := recover(); r != nil {
			err = cu.Errorf(cu.ErrorInvalidImage, "malformed ELF image: %v", r)
		}
	}()
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return cu.Errorf(cu.ErrorInvalidImage, "malformed ELF image: %v", err)
	}
	defer f.Close()
	if f.Machine == elf.EM_CUDA {
		// A cubin: its e_flags carry the SASS architecture.
		info.sass = append(info.sass, cubinArch(image))
	}
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.Size == 0 || s.Size > uint64(len(image)) {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		switch {
		case s.Name == ".nv_fatbin" || s.Name == "__nv_relfatbin" || hasFatbinMagic(data):
			if err := info.scanFatbins(data); err != nil {
				return err
			}
		case strings.HasPrefix(s.Name, ".nv_ptx") || s.Name == ".nv.ptx" || looksLikePTX(data) && bytes.Contains(data, []byte(".entry")):
			text := data
			if i := bytes.IndexByte(text, 0); i >= 0 {
				text = text[:i]
			}
			info.ptx = append(info.ptx, ptxCandidate{arch: ptxTargetArch(string(text)), text: string(text)})
		}
	}
	return nil
}

// cubinArch reads the SASS architecture from a cubin's e_flags.
func cubinArch(image []byte) int {
	if len(image) < 52 || image[4] != 2 {
		return 0
	}
	flags := binary.LittleEndian.Uint32(image[48:52])
	if a := int(flags >> 8 & 0xff); a != 0 && image[7] == 0x41 {
		return a
	}
	return int(flags & 0xff)
}

func hasFatbinMagic(b []byte) bool {
	return len(b) >= 16 && (binary.LittleEndian.Uint32(b) == fatbinMagic ||
		binary.LittleEndian.Uint32(b) == fatbinWrapperMagic && bytes.Contains(b[:min(len(b), 64)], []byte{0x50, 0xed, 0x55, 0xba}))
}

// scanFatbins walks one or more fatbin containers (or a runtime wrapper
// followed by one) and collects their PTX entries.
func (info *containerInfo) scanFatbins(b []byte) error {
	found := false
	for off := 0; off+16 <= len(b); {
		magic := binary.LittleEndian.Uint32(b[off:])
		isHeader := binary.LittleEndian.Uint16(b[off+4:]) == 1 && binary.LittleEndian.Uint16(b[off+6:]) == 16
		if magic == fatbinWrapperMagic && !isHeader && off+24 <= len(b) && binary.LittleEndian.Uint32(b[off+4:]) <= 2 {
			// cudart's wrapper: magic, version, pointer, pointer. The
			// pointer is meaningless here; the container follows it.
			off += 8
			continue
		}
		// 0xba55ed50 heads a container; a relocatable one (in objects'
		// __nv_relfatbin) has the wrapper's magic and the same layout.
		if magic != fatbinMagic && !(magic == fatbinWrapperMagic && isHeader) {
			off += 8
			continue
		}
		hdrSize := int(binary.LittleEndian.Uint16(b[off+6:]))
		body := binary.LittleEndian.Uint64(b[off+8:])
		if hdrSize < 16 || hdrSize > len(b)-off || body > uint64(len(b)-off-hdrSize) {
			return cu.Errorf(cu.ErrorInvalidImage, "fatbin at offset %d: header claims %d bytes, image has %d", off, body, len(b)-off-hdrSize)
		}
		if err := info.fatbinEntries(b[off+hdrSize : off+hdrSize+int(body)]); err != nil {
			return err
		}
		found = true
		off += hdrSize + int(body)
		off = (off + 7) &^ 7
	}
	if !found {
		return cu.Errorf(cu.ErrorInvalidImage, "no fatbin container found in the image")
	}
	return nil
}

func (info *containerInfo) fatbinEntries(b []byte) error {
	for off := 0; off+64 <= len(b); {
		e := b[off:]
		kind := binary.LittleEndian.Uint16(e[0:])
		hs := int(binary.LittleEndian.Uint32(e[4:]))
		size := binary.LittleEndian.Uint64(e[8:])
		if hs < 64 || hs > len(e) || size > uint64(len(e)-hs) {
			return cu.Errorf(cu.ErrorInvalidImage, "fatbin entry at offset %d is truncated or malformed", off)
		}
		compSize := uint64(binary.LittleEndian.Uint32(e[16:]))
		arch := int(binary.LittleEndian.Uint32(e[28:]))
		flags := binary.LittleEndian.Uint64(e[40:])
		rawSize := binary.LittleEndian.Uint64(e[56:])
		payload := e[hs : hs+int(size)]
		off += hs + int(size)
		if kind != fatbinKindPTX {
			info.sass = append(info.sass, arch)
			continue
		}
		data, err := decompressEntry(payload, flags, compSize, rawSize)
		if err != nil {
			return cu.Errorf(cu.ErrorInvalidImage, "PTX entry for compute_%d: %v", arch, err)
		}
		if i := bytes.IndexByte(data, 0); i >= 0 {
			data = data[:i]
		}
		info.ptx = append(info.ptx, ptxCandidate{arch: arch, text: string(data)})
	}
	return nil
}

func decompressEntry(payload []byte, flags, compSize, rawSize uint64) ([]byte, error) {
	if compSize == 0 || compSize > uint64(len(payload)) {
		compSize = uint64(len(payload))
	}
	if len(payload) >= 4 && binary.LittleEndian.Uint32(payload) == zstdMagic {
		// The payload is padded to 8 bytes; the frame is compSize long.
		return unzstd(payload[:compSize], rawSize)
	}
	if flags&(fatbinFlagLZ4|fatbinFlagZstd) == 0 {
		return payload, nil
	}
	if rawSize == 0 || rawSize > maxPTXBytes {
		return nil, fmt.Errorf("compressed entry declares %d bytes uncompressed", rawSize)
	}
	if flags&fatbinFlagZstd != 0 {
		return unzstd(payload[:compSize], rawSize)
	}
	return unlz4(payload[:compSize], int(rawSize))
}

func unzstd(b []byte, rawSize uint64) ([]byte, error) {
	d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxPTXBytes), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	out, err := d.DecodeAll(b, make([]byte, 0, min(rawSize, maxPTXBytes)))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return out, nil
}

var errLZ4 = errors.New("corrupt LZ4 data")

// unlz4 decodes an LZ4 block (no frame header), the format nvcc's
// --compress-all uses for fatbin entries.
func unlz4(src []byte, rawSize int) ([]byte, error) {
	out := make([]byte, 0, rawSize)
	i := 0
	readLen := func(n int) (int, error) {
		if n != 15 {
			return n, nil
		}
		for {
			if i >= len(src) {
				return 0, errLZ4
			}
			b := src[i]
			i++
			n += int(b)
			if n > rawSize+len(src) {
				return 0, errLZ4
			}
			if b != 255 {
				return n, nil
			}
		}
	}
	for i < len(src) {
		tok := src[i]
		i++
		lit, err := readLen(int(tok >> 4))
		if err != nil {
			return nil, err
		}
		if lit > len(src)-i || len(out)+lit > rawSize {
			return nil, errLZ4
		}
		out = append(out, src[i:i+lit]...)
		i += lit
		if i == len(src) {
			break
		}
		if i+2 > len(src) {
			return nil, errLZ4
		}
		dist := int(binary.LittleEndian.Uint16(src[i:]))
		i += 2
		if dist == 0 || dist > len(out) {
			return nil, errLZ4
		}
		ml, err := readLen(int(tok & 15))
		if err != nil {
			return nil, err
		}
		ml += 4
		if len(out)+ml > rawSize {
			return nil, errLZ4
		}
		start := len(out) - dist
		for k := 0; k < ml; k++ {
			out = append(out, out[start+k])
		}
	}
	if len(out) != rawSize {
		return nil, fmt.Errorf("LZ4 data decodes to %d bytes, header says %d", len(out), rawSize)
	}
	return out, nil
}

// ptxTargetArch reads the sm_XX of a PTX text's .target directive.
func ptxTargetArch(text string) int {
	i := strings.Index(text, ".target")
	if i < 0 {
		return 0
	}
	rest := strings.TrimSpace(text[i+len(".target"):])
	rest = strings.TrimPrefix(rest, "sm_")
	n := 0
	for _, ch := range rest {
		if ch < '0' || ch > '9' {
			break
		}
		n = n*10 + int(ch-'0')
	}
	return n
}
