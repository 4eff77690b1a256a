package ratebucket

import "testing"

func TestStartsFullAndAdmitsIntoDebt(t *testing.T) {
	var b Bucket
	if got := b.Take(10, 25); got != 0 {
		t.Fatalf("a full bucket refused: wait %d", got)
	}
	// 10 - 25 = -15 tokens: refused, and the wait covers the debt.
	if got := b.Take(10, 1); got != 2 {
		t.Fatalf("in debt of 15 at 10/s: wait %d, want 2", got)
	}
}

func TestRefusalSpendsNothingAndRefundGivesBack(t *testing.T) {
	var b Bucket
	b.Take(5, 6) // one in debt now
	if got := b.Take(5, 1); got != 1 {
		t.Fatalf("an empty bucket: wait %d, want 1", got)
	}
	b.Refund(5, 6)
	if got := b.Take(5, 1); got != 0 {
		t.Fatalf("after a refund of the whole batch: wait %d, want 0", got)
	}
	b.Refund(5, 100) // never above one second's worth
	b.Take(5, 6)
	if got := b.Take(5, 1); got != 1 {
		t.Fatalf("a refund filled the bucket past its rate: wait %d", got)
	}
}

func TestUnlimited(t *testing.T) {
	var b Bucket
	for range 3 {
		if got := b.Take(0, 1<<20); got != 0 {
			t.Fatalf("rate 0 refused: %d", got)
		}
	}
}

func TestChargeSpendsIntoDebt(t *testing.T) {
	var b Bucket
	b.Charge(10, 30) // 10 - 30 = -20
	if got := b.Take(10, 1); got != 2 {
		t.Fatalf("after a charge of 30 at 10/s: wait %d, want 2", got)
	}
}

func TestRefillStartsFullAgain(t *testing.T) {
	var b Bucket
	b.Take(4, 10) // deep in debt
	if got := b.Take(4, 1); got == 0 {
		t.Fatal("in debt, admitted")
	}
	b.Refill()
	if got := b.Take(4, 1); got != 0 {
		t.Fatalf("after Refill: wait %d, want 0", got)
	}
}
