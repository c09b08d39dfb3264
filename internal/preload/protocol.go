package preload

// The interposer's wire format, mirrored from csrc/protocol.h (see there for
// the layout). TestProtocolMatchesHeader checks that the two agree.
const (
	hsMagic   = 0x31505348
	hsVersion = 2

	envSocket = "HEAPSCOPE_PRELOAD_SOCKET"
	envLib    = "HEAPSCOPE_PRELOAD_LIB"
	envPrefix = "HEAPSCOPE_PRELOAD_"
	envUID    = "HEAPSCOPE_PRELOAD_UID"

	msgHello    = 1
	msgWelcome  = 2
	msgRing     = 3
	msgChildren = 4

	childrenSize = 16
	childrenMax  = 256

	msgTables   = 5
	msgTableReq = 6
	msgTable    = 7

	tableReqSize = 24
	tableMsgSize = 88

	helloContinue  = 1
	helloTruncated = 2
	helloSize      = 40
	helloMax       = 64 * 1024
	welcomeSize    = 16
	ringMsgSize    = 16

	ctlMagic      = 0
	ctlVersion    = 4
	ctlFamilies   = 8
	ctlUnwind     = 12
	ctlMaxFrames  = 16
	ctlRingSize   = 20
	ctlOnFull     = 24
	ctlClock      = 28
	ctlSampleRate = 32
	ctlSampleSeed = 40
	ctlState      = 64
	ctlDoorbell   = 128
	ctlSleeping   = 132
	ctlHeartbeat  = 192
	ctlSize       = 4096

	stateStacks = 0xff
	stateClosed = 0x80000000

	unwindFP       = 0
	unwindDWARF    = 1
	unwindTables   = 2
	unwindTablesFP = 3
	onFullBlock    = 0
	onFullDrop     = 1
	clockTSC       = 0
	clockMono      = 1

	maxFrames = 127

	ringHead    = 0
	ringSeq     = 8
	ringLastTS  = 16
	ringLost    = 24
	ringWaiting = 32
	ringTail    = 64
	ringMagic   = 128
	ringSizeOff = 132
	ringMerged  = 136
	ringData    = 4096
	ringMin     = 16 * 1024
	ringMax     = 1 << 30

	funcMax = 17 // the last event type: event.FuncMremap

	recPad    = 0x80
	recStack  = 0x81
	recModule = 0x82
	recThread = 0x83

	modulePathMax = 4096
	buildIDMax    = 64
)
