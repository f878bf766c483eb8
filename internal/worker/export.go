package worker

// Sleep waits d or until ctx ends; orchestrators pace their loops with it.
var Sleep = sleep
