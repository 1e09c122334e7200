// Package fdlimit raises the process's limit of open files, for the
// programs that hold one descriptor per connection (cmd/chat and its load
// program cmd/chat-load).
package fdlimit
