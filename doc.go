// Package heapscope traces the heap of Linux processes: every allocation,
// reallocation and free, with the call stack that made it.
//
// A session is named and machine-wide. Start traces running processes;
// Launch starts a program held until tracing is on, so that its first
// allocation is seen. Update changes a running session's processes and
// stack-walked events, and Control queries, flushes or stops it, by name
// from any process; Sessions lists them. A session writes a trace file
// (package tracefile, read by packages analyze and report) and feeds live
// hooks (SetHooks). Properties configure it; every field's zero value is its
// default except the trace file's name.
//
// # For ETW users
//
// heapscope is Windows' heap tracing, on Linux. ETW's heap-tracing session
// and the Xbox GDK's hooks map onto it as follows:
//
//	StartHeapTrace(handle, props, name, pids, stackEventIds)  Start(name, props, pids), Launch; Properties.StackEvents
//	UpdateHeapTrace                                         Update
//	ControlTrace (QUERY, FLUSH, STOP) and its codes         Control, ControlOp; QUERY gives a Status
//	EVENT_TRACE_PROPERTIES                                  Properties, checked by Validate with ETW's exclusions and heapscope's own
//	  LogFileName, LogFileMode                              File, FileMode
//	  MaximumFileSize (MB)                                  MaxFileSize (a Size, in bytes)
//	  BufferSize, MaximumBuffers                            BufferSize, Buffers
//	  FlushTimer                                            FlushInterval
//	  EnableFlags                                           Families (event.Family)
//	  the log file's EventRecordCallback                    Properties.Hooks
//	XMemSetWin32HeapTrackingHooks (NULL clears one)         Session.SetHooks(Hooks{...}) (a nil field clears one)
//	ERROR_ALREADY_EXISTS                                    ErrAlreadyExists
//	ERROR_INVALID_FLAGS                                     ErrInvalidFlags (a *PropertyError)
//	ERROR_OUT_OF_MEMORY                                     ErrOutOfMemory
package heapscope
