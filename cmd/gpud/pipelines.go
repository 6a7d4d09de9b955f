package main

// routers lists the concept packages' control routes. The session routes
// above are gpud's own; checkpoint, restore, migration and the image
// store add theirs here once their services are built from the daemon's
// parts (d.manager is their session table and reattacher, d.store the
// host store).
func (d *daemon) routers() []router {
	return nil
}
