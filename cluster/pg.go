package cluster

type pgState struct{}

func (s *pgState) init()                          {}
func (c *Cluster) pgPeerUp(p *peer)               {}
func (c *Cluster) pgPeerDown(p *peer)             {}
func (c *Cluster) pgClose()                       {}
func (c *Cluster) pgFrame(p *peer, d *reader) error { return nil }
