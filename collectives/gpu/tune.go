package gpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/units"
)

// EnvTune names the variable that overrides the launch shapes and the
// algorithm thresholds, for tuning runs on a new machine: a comma-separated
// list of key=value, sizes in nccl-tests' spelling, e.g.
// GOCCL_TUNE=grid=64,ll.all_reduce=128K. Keys: grid (also the staging's
// slots per source, so the default slot follows it), threads (per block,
// a multiple of 32 up to 512), blockbytes, slot, share (a block's share of
// a round is cut to a multiple of this power of two, 16 or more), llblock,
// twoshot (more than two ranks), twoshot2 (two ranks), stash (the
// one-shot AllReduce's round kept in shared memory, 0 for none), cechunk,
// cegrid, cedirect (0 or 1), cefloor.<coll> and ceinline.<coll> (0 or 1)
// (copy-engine reductions), ll.alltoall (the one-shot AllToAll's bytes per
// peer, 0 for none)
// (copy-engine reductions),
// celand (a copy-engine Broadcast's landing slot per peer, 0 for none),
// p2pzc (a Recv into a registered buffer of at least this many bytes
// takes zero copy, 0 for never), p2peager (0 or 1: Sends small enough
// complete without waiting for their Recvs, on by default),
// p2pce (a Send from and a Recv into a registered buffer of at least this
// many bytes take the copy engines, 0 for never, the default: p2pce.go),
// ll.<coll>, ce.<coll> (coll as nccl-tests spells it), and pdl (0 or 1:
// programmatic dependent launch of the kernels, on by default where the
// GPU has it).
// Every rank must be given the same value: New fails otherwise, as
// mismatched launch shapes would leave ranks waiting forever.
const EnvTune = "GOCCL_TUNE"

// tuning is the launch shape and algorithm choice of one communicator.
type tuning struct {
	th collectives.Thresholds
	// grid caps the blocks of the staged kernels' launches (the LL kernel
	// has its own cap), and the staging has a slot per block of it;
	// blockBytes adds a block per that many bytes per rank, so small
	// messages use few blocks and large ones spread. threads is the block
	// of every launch Run makes (the copy-engine reductions' kernel keeps
	// maxThreads).
	grid       int
	threads    int
	blockBytes int64
	// slot is the staging per (half, source rank, block), the most one
	// block moves per barrier; fixed at New, as it sizes the workspace.
	// Unless given (slotGiven), it follows the grid and nranks, which
	// share the staging budget (defaultSlot).
	slot      int64
	slotGiven bool
	nranks    int
	// share: a block's share of a round is a multiple of this many bytes
	// (kernels/common.cuh chunk_elems), so that it starts on the same
	// boundary as the message.
	share int64
	// The LL kernel: a block per llBlock bytes, at least enough blocks that
	// none carries more than its line buffer holds.
	llBlock int64
	// The copy-engine reductions (cereduce.go): the most bytes per chunk
	// through staging (less where the staging holds fewer than two per
	// source), the smallest chunk in direct mode per collective, the
	// reducing kernel's blocks, whether direct mode may run, and which
	// collectives were given a threshold explicitly (the staging mode runs
	// only then or when forced).
	ceChunk    int64
	ceFloor    [collectives.NumCollectives]int64
	ceGrid     int
	ceDirect   bool
	ceExplicit [collectives.NumCollectives]bool
	// ceInline: direct mode pushes on the user's stream itself rather
	// than on a push stream forked from it (cereduce.go).
	ceInline [collectives.NumCollectives]bool
	// ceLand is the landing area per source and half of the copy-engine
	// Broadcast (celand.go); fixed at New, as it sizes the workspace; 0
	// turns it off.
	ceLand int64
	// pdl launches the collective kernels with programmatic stream
	// serialization where the GPU has it (Backend.pdl).
	pdl bool
	// stash is the largest round of a one-shot AllReduce block kept in
	// shared memory (stash.go); 0 turns it off.
	stash int64
	// a2aLL: an AllToAll of up to this many bytes per peer takes the
	// one-shot LL kernel (alltoall.go); 0 turns it off.
	a2aLL int64
	// p2pZC: a Recv of at least this many bytes into a registered buffer
	// offers zero copy (p2pzc.go); 0 turns it off.
	p2pZC int64
	// p2pEager: Sends whose parts fit the eager rings complete without
	// waiting for their Recvs (p2p.go); p2peager=0 makes every Send a
	// rendezvous.
	p2pEager bool
	// p2pCE: a Send or Recv of at least this many bytes on a registered
	// buffer takes the copy engines (p2pce.go); 0, the default, turns it off.
	p2pCE int64
}

// Defaults measured on 2x H200 (docs/perf.md).
const (
	defaultGrid       = 128
	defaultThreads    = maxThreads
	defaultShare      = 16
	defaultBlockBytes = 16 << 10
	defaultLLBlock    = 2 << 10
	defaultCEChunk    = 8 << 20
	// Below 64 KiB a Send through staging costs about what zero copy does:
	// the handshake, not the copy, bounds it.
	defaultP2PZC = 64 << 10
	// The copy-engine reductions' kernels: 64 blocks left the copies more
	// room than 128 (direct mode at 256 MiB - 1 GiB: AllReduce +1-1.5
	// GB/s, ReduceScatter +1.5 at 1 GiB; 32 about as 64).
	defaultCEGrid = 64
	// The landing slots of one half, all sources together: at 2 ranks 8
	// MiB take the copy engines about 21 us on 2x H200, longer than the
	// done and ready handshakes between two Broadcasts (celand.go); with
	// more ranks the root's copies to its peers share its link, so each
	// peer's slot is a share of this.
	defaultCELandHalf = 8 << 20
	maxCELand         = 64 << 20
	// The direct mode's last chunks: an AllReduce's last reduction hides
	// behind the spreads of the chunks before it, a ReduceScatter's does
	// not (scripts/gpu/probe, docs/perf.md). A floor never exceeds half a
	// piece (planCEReduce), so 128 MiB AllReduces still cut two chunks.
	defaultCEFloorAllReduce     = 64 << 20
	defaultCEFloorReduceScatter = 16 << 20
	// stagingBudget: the staging of one rank, 2 halves x nranks sources x
	// grid slots, stays within this, so slots shrink as ranks or blocks
	// grow.
	stagingBudget = 64 << 20
	maxSlot       = 128 << 10
	// maxStaging bounds the staging that an explicit slot and grid ask for.
	maxStaging = 2 << 30
	// slotAlign: every default slot starts on a 4 KiB boundary of the
	// staging, so that no warp's stores straddle more 128-byte lines than
	// they fill. Slots only 16-byte aligned cost the one-shot 3.5-4% at 4-8
	// MiB on 2x H200; 3, 5, 6 and 7 ranks would
	// otherwise get them.
	slotAlign = 4 << 10
	// The LL kernel's line buffers (kernels/ll.cu): kLLMaxBlocks blocks of
	// kLLSlot line bytes, each line 8 bytes of data and 8 of flags, per
	// (half, source rank).
	llMaxBlocks = 128
	llSlot      = 8 << 10
	llBlockMax  = llSlot / 2
	llMaxBytes  = llMaxBlocks * llBlockMax // the most one LL launch takes
)

func defaultTuning(nranks, maxBlocksCfg int) tuning {
	t := tuning{
		th:         collectives.DefaultThresholds,
		grid:       defaultGrid,
		threads:    defaultThreads,
		blockBytes: defaultBlockBytes,
		nranks:     nranks,
		share:      defaultShare,
		llBlock:    defaultLLBlock,
		ceChunk:    defaultCEChunk,
		ceGrid:     defaultCEGrid,
		ceDirect:   true,
		ceLand:     defaultCELandHalf / int64(max(nranks-1, 1)) &^ 15,
		pdl:        true,
		stash:      defaultStash,
		a2aLL:      defaultA2ALL,
		p2pZC:      defaultP2PZC,
		p2pEager:   true,
	}
	t.ceFloor[collectives.AllReduce] = defaultCEFloorAllReduce
	t.ceFloor[collectives.ReduceScatter] = defaultCEFloorReduceScatter
	// Direct mode pushes an AllReduce's chunks on the user's stream:
	// +0.9-3.4 GB/s (medians) at 128 MiB - 1 GiB on 2x H200 against a push
	// stream forked from it. A ReduceScatter's pushes stay forked: inline
	// they measured the same from 256 MiB and about 3 GB/s slower at 128
	// MiB.
	t.ceInline[collectives.AllReduce] = true
	if maxBlocksCfg > 0 {
		t.grid = maxBlocksCfg
		t.ceGrid = min(t.ceGrid, maxBlocksCfg)
	}
	t.slot = defaultSlot(nranks, t.grid)
	return t
}

// defaultSlot shares the staging budget between 2 halves x nranks sources
// x grid blocks (at least 2 sources), in slots on slotAlign boundaries of
// at most maxSlot.
func defaultSlot(nranks, grid int) int64 {
	return min(maxSlot, stagingBudget/(2*int64(max(nranks, 2))*int64(grid))&^(slotAlign-1))
}

// parse applies spec (GOCCL_TUNE's syntax) to t.
func (t *tuning) parse(spec string) error {
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		key, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%s: %q is not key=value: %w", EnvTune, kv, collectives.ErrInvalidArgument)
		}
		if err := t.set(key, val); err != nil {
			return fmt.Errorf("%s: %s: %w", EnvTune, kv, err)
		}
	}
	if !t.slotGiven {
		t.slot = defaultSlot(t.nranks, t.grid)
	}
	return t.check()
}

func (t *tuning) set(key, val string) error {
	flags := map[string]*bool{"cedirect": &t.ceDirect, "pdl": &t.pdl, "p2peager": &t.p2pEager,
		"ceinline.all_reduce": &t.ceInline[collectives.AllReduce], "ceinline.reduce_scatter": &t.ceInline[collectives.ReduceScatter]}
	if dst, ok := flags[key]; ok {
		if val != "0" && val != "1" {
			return fmt.Errorf("want 0 or 1: %w", collectives.ErrInvalidArgument)
		}
		*dst = val == "1"
		return nil
	}
	if dst, ok := map[string]*int{"grid": &t.grid, "cegrid": &t.ceGrid}[key]; ok {
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > maxBlocks {
			return fmt.Errorf("want 1 to %d blocks: %w", maxBlocks, collectives.ErrInvalidArgument)
		}
		*dst = n
		return nil
	}
	if key == "threads" {
		n, err := strconv.Atoi(val)
		if err != nil || n < 32 || n > maxThreads || n%32 != 0 {
			return fmt.Errorf("want a multiple of 32 up to %d: %w", maxThreads, collectives.ErrInvalidArgument)
		}
		t.threads = n
		return nil
	}
	v, err := units.ParseSize(val)
	if err != nil {
		return fmt.Errorf("%w: %w", err, collectives.ErrInvalidArgument)
	}
	switch key {
	case "blockbytes":
		t.blockBytes = v
	case "slot":
		t.slot, t.slotGiven = v, true
	case "share":
		t.share = v
	case "llblock":
		t.llBlock = v
	case "cechunk":
		t.ceChunk = v
	case "celand":
		t.ceLand = v
	case "twoshot":
		t.th.TwoShot = v
	case "twoshot2":
		t.th.TwoShotPair = v
	case "stash":
		t.stash = v
	case "ll.alltoall":
		t.a2aLL = v
	case "p2pzc":
		t.p2pZC = v
	case "p2pce":
		t.p2pCE = v
	default:
		// Only the collectives that have the algorithm take its threshold.
		kind, name, _ := strings.Cut(key, ".")
		c, err := collectives.ParseCollective(name)
		ok := err == nil
		switch {
		case ok && kind == "ll" && c == collectives.AllReduce:
			t.th.LL[c] = v
		case ok && kind == "ce" && c != collectives.Reduce:
			t.th.CopyEngine[c] = v
			t.ceExplicit[c] = true
		case ok && kind == "cefloor" && (c == collectives.AllReduce || c == collectives.ReduceScatter):
			t.ceFloor[c] = v
		default:
			return fmt.Errorf("unknown key: %w", collectives.ErrInvalidArgument)
		}
	}
	return nil
}

func (t *tuning) check() error {
	switch {
	case t.blockBytes < 1 || t.llBlock < 1:
		return fmt.Errorf("%s: block sizes must be positive: %w", EnvTune, collectives.ErrInvalidArgument)
	case t.ceChunk < 16 || t.ceChunk%16 != 0:
		return fmt.Errorf("%s: cechunk %d: want a positive multiple of 16: %w", EnvTune, t.ceChunk, collectives.ErrInvalidArgument)
	case t.ceLand < 0 || t.ceLand%16 != 0 || t.ceLand > maxCELand:
		return fmt.Errorf("%s: celand %d: want a multiple of 16 up to 64M (0: off): %w", EnvTune, t.ceLand, collectives.ErrInvalidArgument)
	case t.ceFloor[collectives.AllReduce] < 16 || t.ceFloor[collectives.ReduceScatter] < 16:
		return fmt.Errorf("%s: cefloor: want at least 16 bytes: %w", EnvTune, collectives.ErrInvalidArgument)
	case t.p2pCE < 0:
		return fmt.Errorf("%s: p2pce %d: want 0 (off) or more bytes: %w", EnvTune, t.p2pCE, collectives.ErrInvalidArgument)
	case t.p2pZC < 0:
		return fmt.Errorf("%s: p2pzc %d: want 0 (off) or more bytes: %w", EnvTune, t.p2pZC, collectives.ErrInvalidArgument)
	case t.stash < 0:
		return fmt.Errorf("%s: stash %d: want 0 (off) or more bytes: %w", EnvTune, t.stash, collectives.ErrInvalidArgument)
	case t.slot < 16 || t.slot%16 != 0 || t.slot > 1<<20:
		return fmt.Errorf("%s: slot %d: want a multiple of 16 up to 1M: %w", EnvTune, t.slot, collectives.ErrInvalidArgument)
	case 2*int64(max(t.nranks, 2))*int64(t.grid)*t.slot > maxStaging:
		return fmt.Errorf("%s: slot %d on %d blocks: %d bytes of staging at %d ranks, want at most %d: %w",
			EnvTune, t.slot, t.grid, 2*int64(max(t.nranks, 2))*int64(t.grid)*t.slot, t.nranks, int64(maxStaging), collectives.ErrInvalidArgument)
	case t.share < 16 || t.share&(t.share-1) != 0 || t.share > t.slot:
		return fmt.Errorf("%s: share %d: want a power of 2 from 16 up to the slot (%d): %w", EnvTune, t.share, t.slot, collectives.ErrInvalidArgument)
	case t.a2aLL < 0 || t.a2aLL > llMaxBytes:
		return fmt.Errorf("%s: ll.alltoall %d: the LL lines hold at most %d bytes per peer (0: off): %w",
			EnvTune, t.a2aLL, llMaxBytes, collectives.ErrInvalidArgument)
	case t.th.LL[collectives.AllReduce] > llMaxBytes:
		return fmt.Errorf("%s: ll.all_reduce %d: the LL kernel holds at most %d bytes: %w",
			EnvTune, t.th.LL[collectives.AllReduce], llMaxBytes, collectives.ErrInvalidArgument)
	}
	return nil
}

// tuningFromEnv is the communicator's tuning: defaults, Config.MaxBlocks,
// then spec (GOCCL_TUNE's value).
func tuningFromEnv(nranks, maxBlocksCfg int, spec string) (tuning, string, error) {
	t := defaultTuning(nranks, min(maxBlocksCfg, maxBlocks))
	err := t.parse(spec)
	return t, spec, err
}

// llBytes is the size of the LL kernel's line buffers in one rank's
// workspace.
func llBytes(nranks int) uint64 { return 2 * uint64(nranks) * llMaxBlocks * llSlot }

// shape is one launch's grid. work is the bytes the blocks share: a
// segment for the two-shot AllReduce, the message otherwise.
func (t *tuning) shape(f family, work int64) int {
	if f == famAllReduceLL {
		least := int((work + llBlockMax - 1) / llBlockMax)
		return max(clampGrid(work, t.llBlock, llMaxBlocks), least)
	}
	return clampGrid(work, t.blockBytes, t.grid)
}

func clampGrid(work, per int64, most int) int {
	return int(max(1, min((work+per-1)/per, int64(most))))
}
