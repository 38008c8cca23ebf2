package diag

// Suggest returns the candidate closest to name by edit distance, when it is
// close enough to be a plausible misspelling, else "". Ties go to the
// candidate listed first, so suggestions are deterministic.
func Suggest(name string, candidates []string) string {
	best, bestDist := "", -1
	limit := max(1, min(3, len(name)/3))
	for _, c := range candidates {
		if c == name {
			continue
		}
		d := distance(name, c)
		if d <= limit && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// distance is the optimal-string-alignment edit distance: insertions,
// deletions, substitutions and transpositions of adjacent characters.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
