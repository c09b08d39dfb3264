package ebpf

import "github.com/heapscope/heapscope/event"

// Mirrors of bpf/heapscope.h. TestHeaderConstants checks they agree with
// the header and with package event.
const (
	maxFrames = event.MaxFrames

	ctrLostRingFull  = 0
	ctrLostMapFull   = 1
	ctrLostOther     = 5
	ctrStacksLost    = 6
	ctrDelivered     = 7
	ctrUnmatched     = 8
	ctrLibsLost      = 9
	ctrStacksCut     = 10
	ctrUWFallback    = 11
	ctrStacksBroken  = 12
	ctrStacksNoTable = 13
	ctrStacksStored  = 14
	numCounters      = 15

	// Cookie layout.
	cookieHeapShift = 8
	cookieSPShift   = 16
	cookieSPMax     = 1<<16 - 1
	cookiePidxShift = 32
	cookieWinShift  = 48 // a free site's window of internal callers
	maxWindows      = 16
	windowRanges    = 4

	// Aggregate mode's spills (struct event's spill).
	spillNew = 1
	spillOld = 2

	// Aggregate mode's tables.
	bucketSlots = 8
	keyBusy     = 1 << 63
	pidxShift   = 48
	maxPidx     = 0x7fff
	addrMask    = 1<<pidxShift - 1
)
