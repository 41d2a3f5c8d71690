package wire

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func acquireFrame() []byte { return []byte{1, 1, 0, 0, 3, 0xe8, 0, 1, 'a'} }

func TestFramesReassemblesSplitAndCoalescedChunks(t *testing.T) {
	chunks := []Chunk{
		{At: ms(1), Dir: Up, Data: acquireFrame()[:3]},
		{At: ms(2), Dir: Up, Data: append(acquireFrame()[3:], 2)},
		{At: ms(3), Dir: Down, Data: []byte{0x11, 0x12, 0, 0, 0, 0, 0, 0, 0}},
		{At: ms(4), Dir: Down, Data: []byte{7, 0x13, 2, 1}},
		{At: ms(5), Dir: Down, Data: []byte{'x'}},
	}
	up, rest, err := Frames(chunks, Up)
	if err != nil || len(rest) != 0 || len(up) != 2 || up[0].Name != "a" || up[0].LeaseMS != 1000 || up[0].At != ms(2) || up[1].Type != Heartbeat {
		t.Fatalf("up = %+v, rest %x, err %v", up, rest, err)
	}
	down, rest, err := Frames(chunks, Down)
	if err != nil || len(rest) != 0 || len(down) != 3 {
		t.Fatalf("down = %+v, rest %x, err %v", down, rest, err)
	}
	if down[1].Token != 7 || down[1].At != ms(4) || down[2].Code != 2 || down[2].Reason != "x" {
		t.Fatalf("down = %+v", down)
	}
}

func TestFramesRejectsUnknownBytes(t *testing.T) {
	if _, _, err := Frames([]Chunk{{Dir: Up, Data: []byte{0x7f}}}, Up); err == nil {
		t.Fatal("0x7f from a client parsed")
	}
	if _, _, err := Frames([]Chunk{{Dir: Up, Data: []byte{1, 4}}}, Up); err == nil {
		t.Fatal("ACQUIRE version 4 parsed")
	}
}

// Version 3: a WATCH is a request, its WATCHING the reply; the EVENTs
// between answer nothing; a valued ACQUIRE and a PROCLAIM parse whole.
func TestAnalyzeWatch(t *testing.T) {
	watch := []byte{0x04, 3, 0, 0, 0x03, 0xe8, 0, 1, 'a'}
	watch = append(watch, make([]byte, 16)...)
	snapshot := append([]byte{0x14}, make([]byte, 16)...)
	snapshot = append(snapshot, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	holder := append([]byte{0x14}, make([]byte, 16)...)
	holder = append(holder, 2, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 2, 'i', 'd', 0, 1, 'v')
	end := append(append([]byte{0x14}, make([]byte, 16)...), 4)
	watching := append([]byte{0x15}, make([]byte, 16)...)
	valued := []byte{0x01, 3, 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 1, 'a', 0, 2, 'v', 'w'}
	proclaim := []byte{0x03, 0, 1, 'x'}
	chunks := []Chunk{
		{At: ms(1), Dir: Up, Data: watch},
		{At: ms(2), Dir: Down, Data: append(append(append(snapshot, holder...), end...), watching...)},
		{At: ms(3), Dir: Up, Data: []byte{Heartbeat}},
		{At: ms(4), Dir: Down, Data: watching},
	}
	a := Analyze(chunks)
	if a.Problem != "" || len(a.Exchanges) != 2 || a.Exchanges[1].Reply == nil || len(a.Heartbeats) != 1 {
		t.Fatalf("analysis = %+v", a)
	}
	if at, ok := a.LastAckedSend(); !ok || at != ms(3) {
		t.Fatalf("last acked send %v %v", at, ok)
	}
	up, rest, err := Frames([]Chunk{{Dir: Up, Data: append(valued, proclaim...)}}, Up)
	if err != nil || len(rest) != 0 || len(up) != 2 {
		t.Fatalf("up = %+v, rest %x, err %v", up, rest, err)
	}
}

// A promotion while a heartbeat is in flight acknowledges nothing: the
// heartbeat's ack is the ACQUIRED after it.
func TestAnalyzePromotionIsNotAnAck(t *testing.T) {
	acquired := []byte{0x12, 0, 0, 0, 0, 0, 0, 0, 9}
	chunks := []Chunk{
		{At: ms(0), Dir: Up, Data: acquireFrame()},
		{At: ms(1), Dir: Down, Data: []byte{0x11}},
		{At: ms(10), Dir: Up, Data: []byte{2}},
		{At: ms(11), Dir: Down, Data: acquired}, // promotion
		{At: ms(20), Dir: Down, Data: acquired}, // ack of the heartbeat
		{At: ms(30), Dir: Up, Data: []byte{2}},  // never answered
	}
	a := Analyze(chunks)
	if len(a.Promotions) != 1 || a.Promotions[0].At != ms(11) {
		t.Fatalf("promotions %+v", a.Promotions)
	}
	if r := a.Exchanges[1].Reply; r == nil || r.At != ms(20) {
		t.Fatalf("heartbeat answered by %+v, want the ACQUIRED at 20ms", r)
	}
	if at, ok := a.LastAckedSend(); !ok || at != ms(10) {
		t.Fatalf("last acked send %v", at)
	}
	if at, ok := a.LastReply(); !ok || at != ms(20) {
		t.Fatalf("last reply %v", at)
	}
	if a.MaxInFlight != 1 || len(a.Heartbeats) != 2 {
		t.Fatalf("in flight %d, heartbeats %d", a.MaxInFlight, len(a.Heartbeats))
	}
}

func TestAnalyzeCountsRequestsInFlight(t *testing.T) {
	chunks := []Chunk{
		{At: ms(0), Dir: Up, Data: acquireFrame()},
		{At: ms(1), Dir: Down, Data: []byte{0x12, 0, 0, 0, 0, 0, 0, 0, 1}},
		{At: ms(5), Dir: Up, Data: []byte{2}},
		{At: ms(6), Dir: Up, Data: []byte{2}},
	}
	if a := Analyze(chunks); a.MaxInFlight != 2 {
		t.Fatalf("max in flight %d, want 2", a.MaxInFlight)
	}
}

// Every session frame of spec/vectors/frames.json is one frame of its
// direction, also when it arrives a byte at a time.
func TestFramesParseTheSessionVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "spec", "vectors", "frames.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Client []struct{ Desc, Hex string } `json:"client_valid_session"`
		Server []struct{ Desc, Hex string } `json:"server_valid_session"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Client) == 0 || len(doc.Server) == 0 {
		t.Fatalf("vectors: %v", err)
	}
	check := func(d Dir, desc, h string) {
		b, _ := hex.DecodeString(h)
		var chunks []Chunk
		for i := range b {
			chunks = append(chunks, Chunk{At: ms(i), Dir: d, Data: b[i : i+1]})
		}
		frames, rest, err := Frames(chunks, d)
		if err != nil || len(rest) != 0 || len(frames) != 1 || len(frames[0].Raw) != len(b) {
			t.Errorf("%s: frames %+v, rest %x, err %v", desc, frames, rest, err)
		}
	}
	for _, v := range doc.Client {
		check(Up, v.Desc, v.Hex)
	}
	for _, v := range doc.Server {
		check(Down, v.Desc, v.Hex)
	}
}

// On a session only SESSION and HEARTBEAT are requests and SESSION_OK and
// ALIVE their replies: a stream's frames answer nothing of the session.
func TestAnalyzeASession(t *testing.T) {
	open := []byte{0x06, 0, 0, 0, 1}
	open = append(open, acquireFrame()...)
	chunks := []Chunk{
		{At: ms(1), Dir: Up, Data: append([]byte{0x05, 4, 0, 0, 3, 0xe8}, open...)},
		{At: ms(2), Dir: Down, Data: []byte{0x16, 0, 0, 0x27, 0x10}},
		{At: ms(3), Dir: Down, Data: []byte{0x17, 0, 0, 0, 1, 0x12, 0, 0, 0, 0, 0, 0, 0, 9}},
		{At: ms(4), Dir: Up, Data: []byte{0x02, 0x08, 0, 0, 0, 1}},
		{At: ms(5), Dir: Down, Data: []byte{0x18, 0, 0, 0, 1}},
		{At: ms(6), Dir: Down, Data: []byte{0x1a}},
	}
	a := Analyze(chunks)
	if a.Problem != "" || len(a.Exchanges) != 2 || a.MaxInFlight != 1 || len(a.Heartbeats) != 1 {
		t.Fatalf("analysis %+v", a)
	}
	if r := a.Exchanges[1].Reply; r == nil || r.Type != Alive || r.At != ms(6) {
		t.Fatalf("the heartbeat's reply: %+v", r)
	}
	if at, ok := a.LastAckedSend(); !ok || at != ms(4) {
		t.Fatalf("last acked send %v %v", at, ok)
	}
}
