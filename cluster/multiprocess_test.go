package cluster

const childEnv = "GOTP_CLUSTER_CHILD"

func childMain() int { return 0 }
