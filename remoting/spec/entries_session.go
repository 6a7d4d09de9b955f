package spec

// Ops about the session itself rather than the device: what the client
// library tells gpud about the program it serves. They take codes
// 500-599 and have no C entry point; the library sends them itself.

var sessionOps = []Op{
	// The program exited normally (exit, a return from main): the
	// session ends at once rather than wait for a reconnect. Sent
	// without waiting for an answer, after every other request of the
	// process; the worker executes what came before it, then stops
	// serving and reports the goodbye to gpud, which ends the session.
	{Code: 500, Name: "Goodbye", Async: true, Custom: true},
}
