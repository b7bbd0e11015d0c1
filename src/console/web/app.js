document.getElementById("app").textContent = "petstore console";
