"""`crawler reparse`: the current extraction run again over archived answers, fetching nothing."""
