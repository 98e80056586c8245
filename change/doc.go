// Package change carries Silo's change notifications from PostgreSQL's change log to the clients
// of this process.
//
// It owns:
//   - the Hub: one dedicated LISTEN connection per process (listen.go), the sequencer that numbers
//     committed changes in commit order (api.change_sequence) and, while writes flow, stays awake
//     so that writers need not notify (sequencer.go), the reader of the change log, and the
//     fan-out index that hands each change to the sessions subscribed to its channel and allowed
//     to see it (fanout.go);
//   - the bounded queue of each session (queue.go): a session that falls behind is disconnected
//     and told where to resume, it never slows the others down;
//   - the session protocol over a websocket (protocol.go, session.go, output.go): subscribe,
//     unsubscribe, resume from a change id, catch-up from the log, debounce, and the read and write
//     pumps of each connection;
//   - asking the SQL which channel patterns a client may subscribe to (channels.go,
//     api.change_channels_check), so that a refused pattern is answered at once.
//
// It must not:
//   - know what a change means: channels, kinds and payloads are the SQL's (sql/change/), and so
//     is the rule of which channel names exist and which are for admins only;
//     any domain that writes to the change log is served the same way, and no profile rule lives
//     here;
//   - decide who a client is: the transport authenticates and hands over an Identity (the readers
//     it may see, the admin flag and a re-authentication callback);
//   - serve HTTP: it takes an upgraded *websocket.Conn and knows no handler, route or response
//     writer (package server has GET /ws);
//   - hold state another process would need: everything a client missed it reads back from the
//     change log when it resumes.
//
// The visibility and channel rules mirror those of api.changes_since, so a live change and the
// same change read back on resume reach exactly the same clients.
package change
