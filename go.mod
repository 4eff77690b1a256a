module github.com/queenmq/ephemeral

go 1.26

require github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
