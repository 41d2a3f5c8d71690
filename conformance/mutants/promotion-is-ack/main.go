// Command promotion-is-ack counts a promotion that arrives while a heartbeat is in flight as that heartbeat's ack.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-promotion-is-ack", base.Bugs{PromotionIsAck: true}) }
