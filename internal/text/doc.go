// Package text holds the small text helpers the rest of tablekeeper shares
// for messages: bounding what goes into an error, a log line or an entity
// an operator reads. It must not import anything but the standard library,
// and must not grow anything about storage (the storage's own text rules — key
// lengths, UTF-16 order — live in storeadapter).
package text
