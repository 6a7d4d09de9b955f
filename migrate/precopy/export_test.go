package precopy

// SetShardMin lets a test split a small round's send into streams.
func SetShardMin(n int64) func() {
	old := sendShardMin
	sendShardMin = n
	return func() { sendShardMin = old }
}
